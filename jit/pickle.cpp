// Pickle protocol 2, the subset of TorchScript archives: the writer (objects, strings, numbers, tensors by
// persistent storage id) and the reader (the opcodes PyTorch 1.13's C++ pickler emits).
#include <troupe/jit/pickle.h>

#include <cstring>
#include <stdexcept>
#include <unordered_map>

#include <troupe/tensor/ops.h>

namespace troupe::jit::pickle {

namespace {
enum : uint8_t {
  MARK = '(', STOP = '.', BININT = 'J', BININT1 = 'K', BININT2 = 'M', NONE = 'N', BINPERSID = 'Q', REDUCE = 'R',
  BINUNICODE = 'X', APPEND = 'a', BUILD = 'b', GLOBAL = 'c', APPENDS = 'e', BINGET = 'h', LONG_BINGET = 'j',
  BINPUT = 'q', LONG_BINPUT = 'r', SETITEM = 's', TUPLE = 't', SETITEMS = 'u', BINFLOAT = 'G', EMPTY_DICT = '}',
  EMPTY_LIST = ']', EMPTY_TUPLE = ')', PROTO = 0x80, NEWOBJ = 0x81, TUPLE1 = 0x85, TUPLE2 = 0x86, TUPLE3 = 0x87,
  NEWTRUE = 0x88, NEWFALSE = 0x89, LONG1 = 0x8a
};

const std::vector<std::pair<ScalarType, const char*>>& storage_names() {
  static const std::vector<std::pair<ScalarType, const char*>> names = {
      {kFloat32, "FloatStorage"}, {kFloat64, "DoubleStorage"}, {kInt64, "LongStorage"}, {kInt32, "IntStorage"},
      {kFloat16, "HalfStorage"},  {kBFloat16, "BFloat16Storage"}, {kBool, "BoolStorage"}, {kUInt8, "ByteStorage"}};
  return names;
}
}  // namespace

std::string storage_class(ScalarType t) {
  for (auto& [d, n] : storage_names())
    if (d == t) return n;
  throw std::invalid_argument("[jit::save] no storage class for this dtype");
}

ScalarType storage_dtype(const std::string& c) {
  for (auto& [d, n] : storage_names())
    if (c == n) return d;
  throw std::runtime_error("storage class " + c + " is not one troupe reads");
}

PValuePtr PValue::get(const std::string& key) const {
  for (const auto& [k, v] : dict)
    if (k && k->kind == Str && k->s == key) return v;
  return nullptr;
}

// ---------------------------------------------------------------------------------------------------
// Writer

Writer::Writer() {
  op(PROTO);
  op(2);
}

void Writer::global(const std::string& module, const std::string& name) {
  op(GLOBAL);
  out_ += module + "\n" + name + "\n";
}

void Writer::str(const std::string& s) {
  op(BINUNICODE);
  const uint32_t n = static_cast<uint32_t>(s.size());
  out_.append(reinterpret_cast<const char*>(&n), 4);  // little-endian hosts only (as PyTorch's CPU files)
  out_ += s;
}

void Writer::boolean(bool b) { op(b ? NEWTRUE : NEWFALSE); }
void Writer::none() { op(NONE); }

void Writer::integer(int64_t v) {
  if (v >= 0 && v < 256) {
    op(BININT1);
    op(static_cast<uint8_t>(v));
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    op(BININT);
    const int32_t x = static_cast<int32_t>(v);
    out_.append(reinterpret_cast<const char*>(&x), 4);
  } else {
    op(LONG1);
    op(8);
    out_.append(reinterpret_cast<const char*>(&v), 8);
  }
}

void Writer::tuple(const std::function<void()>& write_items) {
  op(MARK);
  write_items();
  op(TUPLE);
}

void Writer::object(const std::string& module, const std::string& name, const std::function<void()>& write_attrs) {
  global(module, name);
  op(EMPTY_TUPLE);
  op(NEWOBJ);
  op(EMPTY_DICT);
  op(MARK);
  write_attrs();
  op(SETITEMS);
  op(BUILD);
}

void Writer::tensor(const Tensor& t, const std::string& key) {
  global("torch._utils", "_rebuild_tensor_v2");
  op(MARK);
  tuple([&] {
    str("storage");
    global("torch", storage_class(t.dtype()));
    str(key);
    str("cpu");
    integer(t.numel());
  });
  op(BINPERSID);
  integer(0);  // the storage holds the tensor alone, contiguous
  tuple([&] {
    for (int64_t s : t.sizes()) integer(s);
  });
  tuple([&] {
    int64_t stride = 1;
    std::vector<int64_t> strides(t.sizes().size());
    for (size_t d = strides.size(); d-- > 0;) {
      strides[d] = stride;
      stride *= t.size(static_cast<int64_t>(d));
    }
    for (int64_t s : strides) integer(s);
  });
  boolean(t.requires_grad());
  global("collections", "OrderedDict");
  op(EMPTY_TUPLE);
  op(REDUCE);
  op(TUPLE);
  op(REDUCE);
}

std::string Writer::finish() {
  op(STOP);
  return std::move(out_);
}

// ---------------------------------------------------------------------------------------------------
// Reader

namespace {

class Reader {
 public:
  Reader(const std::string& b, std::string what, const StorageLoader& load) : b_(b), what_(std::move(what)), load_(load) {}

  PValuePtr run() {
    for (;;) {
      const uint8_t c = byte();
      switch (c) {
        case PROTO: byte(); break;
        case STOP:
          if (stack_.size() != 1) fail("the pickle ended with " + std::to_string(stack_.size()) + " values");
          return stack_.back();
        case MARK: marks_.push_back(stack_.size()); break;
        case GLOBAL: {
          auto g = make(PValue::Global);
          g->s = line();
          g->s += "." + line();
          push(g);
          break;
        }
        case BINPUT: memo_[byte()] = top(); break;
        case LONG_BINPUT: memo_[u32()] = top(); break;
        case BINGET: push(memo_at(byte())); break;
        case LONG_BINGET: push(memo_at(u32())); break;
        case EMPTY_TUPLE: push(make(PValue::Tuple)); break;
        case EMPTY_LIST: push(make(PValue::List)); break;
        case EMPTY_DICT: push(make(PValue::Dict)); break;
        case NONE: push(make(PValue::None)); break;
        case NEWTRUE:
        case NEWFALSE: {
          auto v = make(PValue::Bool);
          v->b = c == NEWTRUE;
          push(v);
          break;
        }
        case BININT1: push_int(byte()); break;
        case BININT2: push_int(u16()); break;
        case BININT: push_int(static_cast<int32_t>(u32())); break;
        case LONG1: {
          const uint8_t n = byte();
          if (n > 8) fail("an integer of " + std::to_string(n) + " bytes");
          int64_t v = 0;
          std::memcpy(&v, take(n), n);
          if (n && n < 8 && (static_cast<uint8_t>(b_[pos_ - 1]) & 0x80)) v -= int64_t{1} << (8 * n);  // sign
          push_int(v);
          break;
        }
        case BINFLOAT: {
          uint64_t bits = 0;
          const char* p = take(8);
          for (int k = 0; k < 8; ++k) bits = (bits << 8) | static_cast<uint8_t>(p[k]);  // big-endian
          auto v = make(PValue::Float);
          std::memcpy(&v->f, &bits, 8);
          push(v);
          break;
        }
        case BINUNICODE: {
          const uint32_t n = u32();
          auto v = make(PValue::Str);
          v->s.assign(take(n), n);
          push(v);
          break;
        }
        case TUPLE: {
          auto t = make(PValue::Tuple);
          t->items = pop_to_mark();
          push(t);
          break;
        }
        case TUPLE1:
        case TUPLE2:
        case TUPLE3: {
          const size_t n = c - TUPLE1 + 1;
          auto t = make(PValue::Tuple);
          if (stack_.size() < n) fail("a tuple of missing values");
          t->items.assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          push(t);
          break;
        }
        case APPEND: {
          auto v = pop();
          top()->items.push_back(v);
          break;
        }
        case APPENDS: {
          auto vs = pop_to_mark();
          for (auto& v : vs) top()->items.push_back(v);
          break;
        }
        case SETITEM: {
          auto v = pop();
          auto k = pop();
          top()->dict.emplace_back(k, v);
          break;
        }
        case SETITEMS: {
          auto vs = pop_to_mark();
          if (vs.size() % 2) fail("SETITEMS with an odd number of values");
          for (size_t k = 0; k < vs.size(); k += 2) top()->dict.emplace_back(vs[k], vs[k + 1]);
          break;
        }
        case NEWOBJ: {
          pop();  // the arguments (an empty tuple)
          auto cls = pop();
          auto o = make(PValue::Object);
          o->s = cls->s;
          push(o);
          break;
        }
        case BUILD: {
          auto state = pop();
          top()->dict = state->dict;
          break;
        }
        case BINPERSID: {
          auto pid = pop();
          push(storage(pid));
          break;
        }
        case REDUCE: {
          auto args = pop();
          auto fn = pop();
          push(reduce(fn, args));
          break;
        }
        default: {
          char buf[8];
          std::snprintf(buf, sizeof buf, "0x%02x", c);
          fail(std::string("opcode ") + buf + " at byte " + std::to_string(pos_ - 1) + " is not one troupe reads");
        }
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& m) const { throw std::runtime_error("[jit::load] " + what_ + ": " + m); }
  uint8_t byte() { return static_cast<uint8_t>(*take(1)); }
  const char* take(size_t n) {
    if (pos_ + n > b_.size()) fail("the pickle is truncated (needs " + std::to_string(pos_ + n) + " bytes, has " + std::to_string(b_.size()) + ")");
    const char* p = b_.data() + pos_;
    pos_ += n;
    return p;
  }
  uint32_t u32() {
    uint32_t v;
    std::memcpy(&v, take(4), 4);
    return v;
  }
  uint16_t u16() {
    uint16_t v;
    std::memcpy(&v, take(2), 2);
    return v;
  }
  std::string line() {
    const size_t e = b_.find('\n', pos_);
    if (e == std::string::npos) fail("a GLOBAL without its newline");
    std::string s = b_.substr(pos_, e - pos_);
    pos_ = e + 1;
    return s;
  }
  static PValuePtr make(PValue::Kind k) {
    auto v = std::make_shared<PValue>();
    v->kind = k;
    return v;
  }
  void push(PValuePtr v) { stack_.push_back(std::move(v)); }
  void push_int(int64_t x) {
    auto v = make(PValue::Int);
    v->i = x;
    push(v);
  }
  PValuePtr top() {
    if (stack_.empty()) fail("an opcode needs a value and the stack is empty");
    return stack_.back();
  }
  PValuePtr pop() {
    PValuePtr v = top();
    stack_.pop_back();
    return v;
  }
  PValuePtr memo_at(uint32_t k) {
    auto it = memo_.find(k);
    if (it == memo_.end()) fail("memo entry " + std::to_string(k) + " was never stored");
    return it->second;
  }
  std::vector<PValuePtr> pop_to_mark() {
    if (marks_.empty()) fail("no MARK");
    const size_t m = marks_.back();
    marks_.pop_back();
    if (m > stack_.size()) fail("a MARK past the stack");
    std::vector<PValuePtr> out(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return out;
  }

  // ('storage', <Storage class>, key, location, numel) -> a 1-D tensor over the storage's bytes
  PValuePtr storage(const PValuePtr& pid) {
    if (pid->kind != PValue::Tuple || pid->items.size() != 5 || pid->items[0]->s != "storage")
      fail("a persistent id that is not ('storage', type, key, location, numel)");
    const std::string cls = pid->items[1]->s;
    const std::string key = pid->items[2]->s;
    auto cached = storages_.find(key);
    if (cached != storages_.end()) return cached->second;
    const size_t dot = cls.rfind('.');
    ScalarType dt;
    try {
      dt = storage_dtype(dot == std::string::npos ? cls : cls.substr(dot + 1));
    } catch (const std::exception& e) {
      fail(e.what());
    }
    const int64_t numel = pid->items[4]->i;
    const std::string bytes = load_(key);
    const size_t want = static_cast<size_t>(numel) * element_size(dt);
    if (bytes.size() != want)
      fail("storage " + key + " has " + std::to_string(bytes.size()) + " bytes, its " + std::to_string(numel) +
           " elements need " + std::to_string(want));
    Tensor t = empty({numel}, TensorOptions().dtype(dt));
    if (want) std::memcpy(t.data_ptr(), bytes.data(), want);
    auto v = make(PValue::TensorV);
    v->tensor = t;
    storages_[key] = v;
    return v;
  }

  PValuePtr reduce(const PValuePtr& fn, const PValuePtr& args) {
    if (fn->kind != PValue::Global) fail("REDUCE of something that is not a class or function");
    if (fn->s == "collections.OrderedDict") return make(PValue::Dict);
    if (fn->s == "torch._utils._rebuild_tensor_v2") {
      const auto& a = args->items;
      if (a.size() < 5 || a[0]->kind != PValue::TensorV) fail("_rebuild_tensor_v2 with unexpected arguments");
      std::vector<int64_t> size, stride;
      for (auto& s : a[2]->items) size.push_back(s->kind == PValue::Int ? s->i : -1);
      for (auto& s : a[3]->items) stride.push_back(s->kind == PValue::Int ? s->i : -1);
      // size, stride and offset come from the file: one stride per dim, none negative, and the last
      // element computed without overflow (the fuzzer found size and stride of different lengths)
      if (size.size() != stride.size())
        fail("_rebuild_tensor_v2 with " + std::to_string(size.size()) + " sizes and " + std::to_string(stride.size()) + " strides");
      const Tensor& st = a[0]->tensor;
      int64_t last = a[1]->kind == PValue::Int ? a[1]->i : -1;
      if (last < 0) fail("_rebuild_tensor_v2 with a negative or missing storage offset");
      bool empty_tensor = false;
      for (size_t d = 0; d < size.size(); ++d) {
        if (size[d] < 0 || stride[d] < 0)
          fail("_rebuild_tensor_v2 with a negative size or stride in dim " + std::to_string(d));
        empty_tensor = empty_tensor || size[d] == 0;
      }
      for (size_t d = 0; d < size.size() && !empty_tensor; ++d) {
        int64_t span = 0;
        if (__builtin_mul_overflow(size[d] - 1, stride[d], &span) || __builtin_add_overflow(last, span, &last))
          fail("a tensor reaches past the end of its storage");
      }
      if (empty_tensor ? last > st.numel() : last >= st.numel()) fail("a tensor reaches past the end of its storage");
      Tensor t = st.as_strided(size, stride, a[1]->i).clone();  // its own storage
      if (a[4]->kind == PValue::Bool && a[4]->b && t.is_floating_point()) t.requires_grad_(true);
      auto v = make(PValue::TensorV);
      v->tensor = t;
      return v;
    }
    fail("REDUCE of " + fn->s + ", which troupe does not read");
  }

  const std::string& b_;
  std::string what_;
  const StorageLoader& load_;
  size_t pos_ = 0;
  std::vector<PValuePtr> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, PValuePtr> memo_;
  std::unordered_map<std::string, PValuePtr> storages_;
};

}  // namespace

PValuePtr read(const std::string& bytes, const std::string& what, const StorageLoader& load) {
  return Reader(bytes, what, load).run();
}

}  // namespace troupe::jit::pickle
