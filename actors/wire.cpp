// The Values codec (wire.h): encode / decode with size checks before every allocation.
#include <troupe/actors/wire.h>

#include <troupe/actors/runtime.h>

#include <atomic>
#include <cstring>
#include <limits>
#include <stdexcept>

#include <troupe/tensor/backend.h>
#include <troupe/tensor/ops.h>

namespace troupe::actors::wire {
namespace {

constexpr uint32_t kMagic = 0x31415254;  // "TRA1"
constexpr int kMaxDepth = 32;
constexpr int kMaxDims = 64;
constexpr uint8_t kUndefinedTensor = 255;
// A tensor's dtype code with this bit set: a device (type, index) follows; a CPU tensor's has it clear.
constexpr uint8_t kOnDevice = 0x80;
constexpr uint8_t kDeviceCuda = 1;

template <class T>
void put(std::string& out, T x) {
  char buf[sizeof(T)];
  std::memcpy(buf, &x, sizeof(T));
  out.append(buf, sizeof(T));
}

void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.append(s);
}

// A tensor's dtype (and its device unless it is the CPU), ndim and dims (a CUDA tensor's bytes follow from
// its CPU copy).
void put_tensor_header(std::string& out, const Tensor& t) {
  const Device d = t.device();
  const auto dt = static_cast<uint8_t>(t.dtype());
  if (d.is_cpu()) {
    put<uint8_t>(out, dt);
  } else {
    if (!d.is_cuda() || d.index > 255) throw ActorError("[actors] wire: a tensor on device " + d.str() + " (cpu and cuda:0-255 travel)");
    put<uint8_t>(out, dt | kOnDevice);
    put<uint8_t>(out, kDeviceCuda);
    put<uint8_t>(out, static_cast<uint8_t>(std::max(d.index(), 0)));
  }
  auto sizes = t.sizes();
  if (sizes.size() > kMaxDims) throw ActorError("[actors] wire: a tensor of more than 64 dimensions");
  put<uint8_t>(out, static_cast<uint8_t>(sizes.size()));
  for (int64_t s : sizes) put<int64_t>(out, s);
}

void encode_value(const Value& v, std::string& out, const RefEncoder& refs, const TensorOffloader& offload, int depth) {
  if (depth > kMaxDepth) throw ActorError("[actors] wire: lists nest deeper than 32");
  const auto& var = v.get();
  if (offload && var.index() == 5 && std::get<Tensor>(var).defined()) {
    const Tensor& t = std::get<Tensor>(var);
    int64_t id = offload(t);
    if (id >= 0) {
      put<uint8_t>(out, 8);
      put_tensor_header(out, t);
      put<int64_t>(out, id);
      return;
    }
  }
  put<uint8_t>(out, static_cast<uint8_t>(var.index()));
  switch (var.index()) {
    case 0: break;
    case 1: put<uint8_t>(out, std::get<bool>(var) ? 1 : 0); break;
    case 2: put<int64_t>(out, std::get<int64_t>(var)); break;
    case 3: put<double>(out, std::get<double>(var)); break;
    case 4: put_string(out, std::get<std::string>(var)); break;
    case 5: {
      const Tensor& t0 = std::get<Tensor>(var);
      if (!t0.defined()) {
        put<uint8_t>(out, kUndefinedTensor);
        break;
      }
      put_tensor_header(out, t0);
      Tensor t = t0.is_cpu() ? t0 : t0.cpu();
      if (!t.is_contiguous()) t = t.contiguous();
      out.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
      break;
    }
    case 6: {
      const ActorRef& r = std::get<ActorRef>(var);
      put<uint32_t>(out, r.valid() ? refs(r) : std::numeric_limits<uint32_t>::max());
      put<int32_t>(out, r.rank());
      put_string(out, r.name());
      break;
    }
    case 7: {
      const List& l = std::get<List>(var);
      put<uint32_t>(out, static_cast<uint32_t>(l.size()));
      for (const Value& x : l) encode_value(x, out, refs, offload, depth + 1);
      break;
    }
  }
}

class Reader {
 public:
  Reader(const char* p, size_t n) : p_(p), end_(p + n) {}
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T x;
    std::memcpy(&x, p_, sizeof(T));
    p_ += sizeof(T);
    return x;
  }
  void need(size_t n, const char* what) const {
    if (n > remaining()) {
      throw ActorError(std::string("[actors] wire: truncated message: ") + what + " needs " + std::to_string(n) +
                       " bytes, " + std::to_string(remaining()) + " remain");
    }
  }
  const char* take(size_t n, const char* what) {
    need(n, what);
    const char* q = p_;
    p_ += n;
    return q;
  }
  std::string string(const char* what) {
    uint64_t n = get<uint64_t>(what);
    need(n, what);
    return std::string(take(n, what), n);
  }

 private:
  const char* p_;
  const char* end_;
};

struct TensorHeader {
  ScalarType dtype;
  std::vector<int64_t> shape;
  Device device;
};

// dtype, device and shape of a tensor record; `bound`: the most bytes it may claim.
TensorHeader tensor_header(Reader& r, uint8_t dt, uint64_t bound, const char* what) {
  Device device(kCPU);
  if (dt & kOnDevice) {
    dt = static_cast<uint8_t>(dt & ~kOnDevice);
    const uint8_t type = r.get<uint8_t>("a tensor's device type");
    const uint8_t index = r.get<uint8_t>("a tensor's device index");
    if (type != kDeviceCuda) throw ActorError("[actors] wire: a tensor of unknown device type code " + std::to_string(type));
    device = Device(kCUDA, index);
  }
  if (dt > static_cast<uint8_t>(ScalarType::Float64)) {
    throw ActorError("[actors] wire: a tensor of unknown dtype code " + std::to_string(dt));
  }
  auto dtype = static_cast<ScalarType>(dt);
  uint8_t ndim = r.get<uint8_t>("a tensor's ndim");
  if (ndim > kMaxDims) throw ActorError("[actors] wire: a tensor of " + std::to_string(ndim) + " dimensions (at most 64)");
  std::vector<int64_t> shape(ndim);
  const size_t esize = element_size(dtype);
  // numel * esize must fit in `bound`: checked before the allocation, without overflow.
  uint64_t numel = 1;
  bool too_big = false;
  for (auto& d : shape) {
    d = r.get<int64_t>("a tensor's dims");
    if (d < 0) throw ActorError("[actors] wire: a tensor dimension of " + std::to_string(d));
    if (d != 0 && numel > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) too_big = true;
    else numel *= static_cast<uint64_t>(d);
  }
  if (too_big || numel > bound / esize) {
    throw ActorError("[actors] wire: a tensor's shape claims more bytes than the " + std::to_string(bound) + " " + what);
  }
  return {dtype, std::move(shape), device};
}

std::atomic<int> g_cuda_arrival{-1};  // set_cuda_arrival_device

// `t` (decoded on the CPU), sent from device `d`: a CUDA tensor stays a CUDA tensor across processes, as
// between the ranks of one process (by handle), on arrival_device(d). A process without CUDA keeps it on
// the CPU (it can compute on nothing else: a GPU learner's weights reach CPU-only collectors); one with
// fewer devices than that index refuses it.
Tensor to_sent_device(Tensor t, const Device& d) {
  if (d.is_cpu() || !cuda::is_available()) return t;
  const Device to = arrival_device(d);
  if (to.index >= cuda::device_count()) {
    throw ActorError("[actors] wire: a tensor sent from " + d.str() + " was to arrive on " + to.str() +
                     " in a process that has " + std::to_string(cuda::device_count()) +
                     " CUDA device(s) (actors::set_cuda_arrival_device picks the device)");
  }
  return t.to(to);
}

Value decode_value(Reader& r, const RefDecoder& refs, const TensorFetcher& fetch, int depth) {
  if (depth > kMaxDepth) throw ActorError("[actors] wire: lists nest deeper than 32");
  uint8_t tag = r.get<uint8_t>("a value's tag");
  switch (tag) {
    case 0: return Value();
    case 1: {
      uint8_t b = r.get<uint8_t>("a bool");
      if (b > 1) throw ActorError("[actors] wire: a bool of value " + std::to_string(b));
      return Value(b == 1);
    }
    case 2: return Value(r.get<int64_t>("an int"));
    case 3: return Value(r.get<double>("a float"));
    case 4: return Value(r.string("a string"));
    case 5: {
      uint8_t dt = r.get<uint8_t>("a tensor's dtype");
      if (dt == kUndefinedTensor) return Value(Tensor());
      auto [dtype, shape, device] = tensor_header(r, dt, r.remaining(), "that remain");
      uint64_t numel = 1;
      for (int64_t d : shape) numel *= static_cast<uint64_t>(d);
      const size_t esize = element_size(dtype);
      const size_t nbytes = static_cast<size_t>(numel) * esize;
      const char* src = r.take(nbytes, "a tensor's bytes");
      Tensor t = empty(shape, TensorOptions().dtype(dtype));
      if (nbytes) std::memcpy(t.data_ptr(), src, nbytes);
      return Value(to_sent_device(std::move(t), device));
    }
    case 6: {
      uint32_t index = r.get<uint32_t>("an ActorRef's index");
      int32_t rank = r.get<int32_t>("an ActorRef's rank");
      std::string name = r.string("an ActorRef's name");
      if (index == std::numeric_limits<uint32_t>::max()) return Value(ActorRef());
      return Value(refs(index, std::move(name), rank));
    }
    case 7: {
      uint32_t n = r.get<uint32_t>("a list's length");
      if (n > r.remaining()) r.need(n, "a list's values (one byte each at least)");
      List l;
      l.reserve(n);
      for (uint32_t i = 0; i < n; ++i) l.push_back(decode_value(r, refs, fetch, depth + 1));
      return Value(std::move(l));
    }
    case 8: {
      uint8_t dt = r.get<uint8_t>("a data-plane tensor's dtype");
      auto [dtype, shape, device] = tensor_header(r, dt, kMaxDataPlaneBytes, "a data-plane tensor may have");
      int64_t id = r.get<int64_t>("a data-plane tensor's id");
      if (!fetch) throw ActorError("[actors] wire: a data-plane tensor where no data plane is connected");
      // (Its bytes are in when fetch returns on the lane; CAF's data plane, whose receive completes later,
      // carries CPU tensors only: on_data_plane.)
      return Value(to_sent_device(fetch(dtype, shape, id), device));
    }
    default: throw ActorError("[actors] wire: unknown value tag " + std::to_string(tag));
  }
}

}  // namespace

void encode(const List& values, std::string& out, const RefEncoder& refs, const TensorOffloader& offload) {
  put<uint32_t>(out, kMagic);
  put<uint32_t>(out, static_cast<uint32_t>(values.size()));
  for (const Value& v : values) encode_value(v, out, refs, offload, 0);
}

List decode(const char* data, size_t size, const RefDecoder& refs, const TensorFetcher& fetch) {
  Reader r(data, size);
  uint32_t magic = r.get<uint32_t>("the header");
  if (magic != kMagic) throw ActorError("[actors] wire: not a troupe message (bad magic)");
  uint32_t n = r.get<uint32_t>("the value count");
  if (n > r.remaining()) r.need(n, "the values (one byte each at least)");
  List out;
  out.reserve(n);
  for (uint32_t i = 0; i < n; ++i) out.push_back(decode_value(r, refs, fetch, 0));
  if (r.remaining() != 0) {
    throw ActorError("[actors] wire: " + std::to_string(r.remaining()) + " trailing bytes after the values");
  }
  return out;
}

namespace {
constexpr uint32_t kLaneMagic = 0x314c5254;  // "TRL1"
constexpr uint32_t kMaxBodies = uint32_t{1} << 20;
}  // namespace

void encode_lane_head(const LaneHead& h, std::string& out) {
  put<uint32_t>(out, kLaneMagic);
  put<uint8_t>(out, h.kind);
  put<uint64_t>(out, h.seq);
  put<uint64_t>(out, h.id);
  put<uint64_t>(out, h.target);
  put<int32_t>(out, h.from_rank);
  put<uint8_t>(out, h.ok ? 1 : 0);
  put_string(out, h.text);
  put<uint32_t>(out, static_cast<uint32_t>(h.bodies.size()));
  for (uint64_t b : h.bodies) put<uint64_t>(out, b);
}

LaneHead decode_lane_head(const char* data, size_t size) {
  Reader r(data, size);
  if (r.get<uint32_t>("the lane header") != kLaneMagic) throw ActorError("[actors] wire: not a troupe lane message (bad magic)");
  LaneHead h;
  h.kind = r.get<uint8_t>("the lane message's kind");
  if (h.kind != LaneHead::kCall && h.kind != LaneHead::kReply && h.kind != LaneHead::kStop) {
    throw ActorError("[actors] wire: unknown lane message kind " + std::to_string(h.kind));
  }
  h.seq = r.get<uint64_t>("the lane message's sequence number");
  h.id = r.get<uint64_t>("the request id");
  h.target = r.get<uint64_t>("the target actor");
  h.from_rank = r.get<int32_t>("the sender's rank");
  uint8_t ok = r.get<uint8_t>("the reply's status");
  if (ok > 1) throw ActorError("[actors] wire: a reply status of " + std::to_string(ok));
  h.ok = ok == 1;
  h.text = r.string(h.kind == LaneHead::kCall ? "the method name" : "the error text");
  uint32_t n = r.get<uint32_t>("the body count");
  if (n > kMaxBodies) throw ActorError("[actors] wire: " + std::to_string(n) + " bodies (at most 2^20)");
  r.need(size_t{n} * sizeof(uint64_t), "the body sizes");
  h.bodies.resize(n);
  for (auto& b : h.bodies) b = r.get<uint64_t>("a body size");
  h.blob_offset = size - r.remaining();
  return h;
}

bool fuzz_decode(const uint8_t* data, size_t size) {
  try {
    decode(reinterpret_cast<const char*>(data), size, [](uint32_t, std::string, int) { return ActorRef(); });
    return true;
  } catch (const ActorError&) {
  }
  try {  // a lane message: its head, then its blob (bodies as empty tensors of the announced sizes)
    LaneHead h = decode_lane_head(reinterpret_cast<const char*>(data), size);
    size_t next = 0;
    decode(reinterpret_cast<const char*>(data) + h.blob_offset, size - h.blob_offset,
           [](uint32_t, std::string, int) { return ActorRef(); },
           [&](ScalarType, const std::vector<int64_t>&, int64_t id) {
             if (id < 0 || static_cast<size_t>(id) != next || next >= h.bodies.size()) throw ActorError("[actors] wire: body index");
             ++next;
             return Tensor();
           });
    return true;
  } catch (const ActorError&) {
    return false;
  }
}

Device arrival_device(const Device& sent) {
  const int home = g_cuda_arrival.load(std::memory_order_relaxed);
  return sent.is_cuda() && home >= 0 ? Device(kCUDA, home) : sent;
}

}  // namespace troupe::actors::wire

namespace troupe::actors {
void set_cuda_arrival_device(int index) {
  if (index < -1) throw std::invalid_argument("[actors] set_cuda_arrival_device(" + std::to_string(index) + "): an index >= 0, or -1");
  wire::g_cuda_arrival.store(index, std::memory_order_relaxed);
}
int cuda_arrival_device() { return wire::g_cuda_arrival.load(std::memory_order_relaxed); }
}  // namespace troupe::actors
