// Fixture loader and tensor comparison; see fixtures.h and tests/fixtures/README.md for the format.
#include "fixtures.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <type_traits>
#include <utility>

namespace troupe::testing {

// ============================================================================ small helpers
namespace {

std::vector<std::string> split_ws(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0, n = s.size();
  while (i < n) {
    while (i < n && (s[i] == ' ' || s[i] == '\t')) ++i;
    if (i >= n) break;
    size_t j = i;
    while (j < n && s[j] != ' ' && s[j] != '\t') ++j;
    out.emplace_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

bool is_blank(const std::string& s) {
  for (char c : s)
    if (c != ' ' && c != '\t') return false;
  return true;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

std::string fmt_double(double v, bool full) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, full ? "%.17g" : "%.9g", v);
  return buf;
}

bool parse_int64(const std::string& tok, int64_t& out) {
  const char* b = tok.data();
  const char* e = b + tok.size();
  if (b != e && *b == '+') ++b;
  auto r = std::from_chars(b, e, out);
  return r.ec == std::errc() && r.ptr == e && b != e;
}

template <typename F>
bool parse_floating(const std::string& tok, F& out) {
  const char* b = tok.data();
  const char* e = b + tok.size();
  if (b != e && *b == '+') ++b;
  auto r = std::from_chars(b, e, out, std::chars_format::general);
  return r.ec == std::errc() && r.ptr == e && b != e;
}

}  // namespace

ScalarType parse_dtype_name(const std::string& s) {
  if (s == "float32") return kFloat32;
  if (s == "float64") return kFloat64;
  if (s == "float16") return kFloat16;
  if (s == "bfloat16") return kBFloat16;
  if (s == "int64") return kInt64;
  if (s == "int32") return kInt32;
  if (s == "uint8") return kUInt8;
  if (s == "bool") return kBool;
  throw std::invalid_argument("unknown dtype '" + s + "'");
}

const char* fixture_dtype_name(ScalarType t) {
  switch (t) {
    case kBool: return "bool";
    case kUInt8: return "uint8";
    case kInt32: return "int32";
    case kInt64: return "int64";
    case kFloat16: return "float16";
    case kBFloat16: return "bfloat16";
    case kFloat32: return "float32";
    case kFloat64: return "float64";
  }
  return "?";
}

std::string fixtures_dir() {
  if (const char* e = std::getenv("TROUPE_FIXTURES_DIR"); e != nullptr && *e != '\0') return e;
#ifdef TROUPE_FIXTURES_DIR
  return TROUPE_FIXTURES_DIR;
#else
  return "tests/fixtures";
#endif
}

// ============================================================================ parser
/// Reads a fixture file line by line; every error names the file and the line.
struct FixtureParser {
  std::string path;
  std::vector<std::string> lines;
  size_t pos = 0;  // index of the next line to read

  explicit FixtureParser(const std::string& file) {
    path = (!file.empty() && file[0] == '/') ? file : fixtures_dir() + "/" + file;
    std::ifstream in(path, std::ios::binary);
    if (!in)
      throw std::runtime_error("fixtures: cannot open '" + path + "' (fixtures_dir() is '" + fixtures_dir() +
                               "'; set TROUPE_FIXTURES_DIR to the tests/fixtures directory)");
    std::string ln;
    while (std::getline(in, ln)) {
      if (!ln.empty() && ln.back() == '\r') ln.pop_back();
      lines.push_back(std::move(ln));
    }
    if (in.bad()) throw std::runtime_error("fixtures: error reading '" + path + "'");
  }

  [[noreturn]] void fail(size_t line_index, const std::string& what) const {
    throw std::runtime_error("fixtures: " + path + ":" + std::to_string(line_index + 1) + ": " + what);
  }

  bool at_end() const { return pos >= lines.size(); }

  /// Skips comment and blank lines; false at the end of the file.
  bool skip_to_content() {
    while (pos < lines.size() && (is_blank(lines[pos]) || lines[pos][0] == '#')) ++pos;
    return pos < lines.size();
  }

  /// Parses the record whose header is at `pos` (and its values line), advancing past both.
  std::pair<std::string, Fixtures::Record> parse_record() {
    const size_t hl = pos;
    const std::string& h = lines[hl];
    if (h.empty() || h[0] != '@') fail(hl, "expected a record header '@<name> <dtype> <ndim> <dims...>', got '" + h + "'");
    std::vector<std::string> tok = split_ws(h);
    std::string name = tok[0].substr(1);
    if (name.empty()) fail(hl, "bad header (empty record name): '" + h + "'");
    if (tok.size() < 3) fail(hl, "bad header for '" + name + "' (need '@<name> <dtype> <ndim> <dims...>'): '" + h + "'");
    Fixtures::Record r;
    r.line = static_cast<int>(hl + 1);
    try {
      r.dtype = parse_dtype_name(tok[1]);
    } catch (const std::invalid_argument&) {
      fail(hl, "bad header for '" + name + "': unknown dtype '" + tok[1] + "'");
    }
    int64_t ndim = 0;
    if (!parse_int64(tok[2], ndim) || ndim < 0 || ndim > 64)
      fail(hl, "bad header for '" + name + "': bad ndim '" + tok[2] + "'");
    if (static_cast<int64_t>(tok.size()) != 3 + ndim)
      fail(hl, "bad header for '" + name + "': ndim is " + std::to_string(ndim) + " but " +
                   std::to_string(tok.size() - 3) + " sizes follow");
    int64_t numel = 1;
    for (int64_t d = 0; d < ndim; ++d) {
      int64_t s = 0;
      if (!parse_int64(tok[3 + d], s) || s < 0)
        fail(hl, "bad header for '" + name + "': bad size '" + tok[3 + d] + "'");
      r.sizes.push_back(s);
      numel *= s;
      if (numel > (int64_t{1} << 32)) fail(hl, "bad header for '" + name + "': too many elements");
    }
    if (hl + 1 >= lines.size()) fail(hl, "record '" + name + "' has no values line (end of file)");
    const size_t vl = hl + 1;
    std::vector<std::string> vals = split_ws(lines[vl]);
    if (static_cast<int64_t>(vals.size()) != numel)
      fail(vl, "record '" + name + "' with shape " + shape_text(r.sizes) + " needs " + std::to_string(numel) +
                   " values, the line has " + std::to_string(vals.size()));
    const bool floating = is_floating_point(r.dtype);
    if (floating) r.fvalues.reserve(vals.size());
    else r.ivalues.reserve(vals.size());
    for (size_t i = 0; i < vals.size(); ++i) {
      const std::string& v = vals[i];
      auto bad = [&](const std::string& why) {
        fail(vl, "record '" + name + "' value #" + std::to_string(i) + " '" + v + "': " + why);
      };
      switch (r.dtype) {
        case kFloat64: {
          double d;
          if (!parse_floating(v, d)) bad("not a float64");
          r.fvalues.push_back(d);
          break;
        }
        case kFloat32:
        case kFloat16:
        case kBFloat16: {
          float f;
          if (!parse_floating(v, f)) bad("not a float32");
          if (r.dtype == kFloat16 && !std::isnan(f) && static_cast<float>(Half(f)) != f)
            bad("not exactly representable in float16");
          if (r.dtype == kBFloat16 && !std::isnan(f) && static_cast<float>(BFloat16(f)) != f)
            bad("not exactly representable in bfloat16");
          r.fvalues.push_back(static_cast<double>(f));
          break;
        }
        case kInt64:
        case kInt32:
        case kUInt8: {
          int64_t x;
          if (!parse_int64(v, x)) bad("not an integer");
          if (r.dtype == kInt32 && (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()))
            bad("out of range for int32");
          if (r.dtype == kUInt8 && (x < 0 || x > 255)) bad("out of range for uint8");
          r.ivalues.push_back(x);
          break;
        }
        case kBool: {
          if (v != "0" && v != "1") bad("a bool must be 0 or 1");
          r.ivalues.push_back(v == "1");
          break;
        }
      }
    }
    pos = vl + 1;
    return {std::move(name), std::move(r)};
  }

  /// At `pos` is `@print <name> [key=value]...`: parses the flags into `pc`, advancing one line.
  void parse_print_line(PrintCase& pc) {
    std::vector<std::string> tok = split_ws(lines[pos]);
    if (tok.size() < 2) fail(pos, "'@print' needs a case name");
    pc.name = tok[1];
    for (size_t i = 2; i < tok.size(); ++i) {
      const std::string& t = tok[i];
      size_t eq = t.find('=');
      if (eq == std::string::npos) fail(pos, "bad '@print' token '" + t + "' (want key=value)");
      std::string key = t.substr(0, eq), val = t.substr(eq + 1);
      if (key == "requires_grad") {
        if (val != "0" && val != "1") fail(pos, "requires_grad must be 0 or 1, got '" + val + "'");
        pc.requires_grad = val == "1";
      } else if (key == "grad_fn") {
        pc.grad_fn = val;
      } else {
        fail(pos, "unknown '@print' key '" + key + "'");
      }
    }
    ++pos;
  }

  /// At `pos` is `@expect <n>`: returns n, advancing one line; the caller reads the raw lines.
  size_t parse_expect_line() {
    std::vector<std::string> tok = split_ws(lines[pos]);
    int64_t n = -1;
    if (tok.size() != 2 || tok[0] != "@expect" || !parse_int64(tok[1], n) || n < 0)
      fail(pos, "expected '@expect <number of lines>', got '" + lines[pos] + "'");
    if (pos + 1 + static_cast<size_t>(n) > lines.size())
      fail(pos, "'@expect " + std::to_string(n) + "' but the file ends after " +
                    std::to_string(lines.size() - pos - 1) + " more lines");
    ++pos;
    return static_cast<size_t>(n);
  }

  static bool starts_with_word(const std::string& line, const char* word) {
    size_t n = std::strlen(word);
    return line.compare(0, n, word) == 0 && (line.size() == n || line[n] == ' ' || line[n] == '\t');
  }
};

// ============================================================================ Fixtures
Fixtures Fixtures::load(const std::string& file) {
  FixtureParser p(file);
  auto data = std::make_shared<Data>();
  data->path = p.path;
  auto add = [&](std::pair<std::string, Record> rec, size_t header_index) {
    if (data->records.count(rec.first))
      p.fail(header_index, "duplicate record '" + rec.first + "' (first at line " +
                               std::to_string(data->records.at(rec.first).line) + ")");
    data->order.push_back(rec.first);
    data->records.emplace(std::move(rec.first), std::move(rec.second));
  };
  while (p.skip_to_content()) {
    const std::string& ln = p.lines[p.pos];
    if (FixtureParser::starts_with_word(ln, "@print")) {
      PrintCase ignored;
      p.parse_print_line(ignored);  // validates; the value record that follows is loaded as usual
    } else if (FixtureParser::starts_with_word(ln, "@expect")) {
      size_t n = p.parse_expect_line();
      p.pos += n;  // raw str() lines
    } else {
      size_t h = p.pos;
      add(p.parse_record(), h);
    }
  }
  Fixtures f;
  f.data_ = std::move(data);
  return f;
}

const Fixtures::Record& Fixtures::record(const std::string& name) const {
  if (!data_) throw std::runtime_error("fixtures: get('" + name + "') on a Fixtures that was never loaded");
  auto it = data_->records.find(name);
  if (it == data_->records.end()) {
    std::string msg = "fixtures: " + data_->path + ": no record named '" + name + "' (the file has " +
                      std::to_string(data_->order.size()) + " records";
    // suggest records sharing the name's first few characters
    std::string hint;
    size_t shown = 0;
    std::string prefix = name.substr(0, std::min<size_t>(name.size(), 4));
    for (const auto& n : data_->order) {
      if (n.compare(0, prefix.size(), prefix) == 0 && shown < 8) {
        hint += (shown ? ", " : "") + n;
        ++shown;
      }
    }
    if (!hint.empty()) msg += "; similar: " + hint;
    throw std::runtime_error(msg + ")");
  }
  return it->second;
}

Tensor make_tensor(const Fixtures::Record& r) {
  Tensor t = troupe::empty(IntArrayRef(r.sizes), TensorOptions().dtype(r.dtype));
  const size_t n = is_floating_point(r.dtype) ? r.fvalues.size() : r.ivalues.size();
  if (n == 0) return t;
  switch (r.dtype) {
    case kFloat64: {
      double* p = t.data_ptr<double>();
      for (size_t i = 0; i < n; ++i) p[i] = r.fvalues[i];
      break;
    }
    case kFloat32: {
      float* p = t.data_ptr<float>();
      for (size_t i = 0; i < n; ++i) p[i] = static_cast<float>(r.fvalues[i]);
      break;
    }
    case kFloat16: {
      Half* p = t.data_ptr<Half>();
      for (size_t i = 0; i < n; ++i) p[i] = Half(static_cast<float>(r.fvalues[i]));
      break;
    }
    case kBFloat16: {
      BFloat16* p = t.data_ptr<BFloat16>();
      for (size_t i = 0; i < n; ++i) p[i] = BFloat16(static_cast<float>(r.fvalues[i]));
      break;
    }
    case kInt64: {
      int64_t* p = t.data_ptr<int64_t>();
      for (size_t i = 0; i < n; ++i) p[i] = r.ivalues[i];
      break;
    }
    case kInt32: {
      int32_t* p = t.data_ptr<int32_t>();
      for (size_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(r.ivalues[i]);
      break;
    }
    case kUInt8: {
      uint8_t* p = t.data_ptr<uint8_t>();
      for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(r.ivalues[i]);
      break;
    }
    case kBool: {
      bool* p = t.data_ptr<bool>();
      for (size_t i = 0; i < n; ++i) p[i] = r.ivalues[i] != 0;
      break;
    }
  }
  return t;
}

Tensor Fixtures::get(const std::string& name) const { return make_tensor(record(name)); }

bool Fixtures::has(const std::string& name) const { return data_ && data_->records.count(name) != 0; }

std::vector<std::string> Fixtures::names() const { return data_ ? data_->order : std::vector<std::string>{}; }

ScalarType Fixtures::dtype(const std::string& name) const { return record(name).dtype; }

std::vector<int64_t> Fixtures::shape(const std::string& name) const { return record(name).sizes; }

std::vector<int64_t> Fixtures::ints(const std::string& name) const {
  const Record& r = record(name);
  if (!is_floating_point(r.dtype)) return r.ivalues;
  std::vector<int64_t> out;
  out.reserve(r.fvalues.size());
  for (double d : r.fvalues) out.push_back(static_cast<int64_t>(d));
  return out;
}

std::vector<double> Fixtures::doubles(const std::string& name) const {
  const Record& r = record(name);
  if (is_floating_point(r.dtype)) return r.fvalues;
  return std::vector<double>(r.ivalues.begin(), r.ivalues.end());
}

const std::string& Fixtures::path() const {
  static const std::string none;
  return data_ ? data_->path : none;
}

// ============================================================================ print cases
std::string PrintCase::text() const {
  std::string s;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) s += '\n';
    s += lines[i];
  }
  return s;
}

std::vector<PrintCase> load_print_cases(const std::string& file) {
  FixtureParser p(file);
  std::vector<PrintCase> out;
  while (p.skip_to_content()) {
    const size_t start = p.pos;
    if (!FixtureParser::starts_with_word(p.lines[p.pos], "@print"))
      p.fail(p.pos, "expected '@print <name> ...', got '" + p.lines[p.pos] + "'");
    PrintCase pc;
    p.parse_print_line(pc);
    for (const auto& prev : out)
      if (prev.name == pc.name) p.fail(start, "duplicate print case '" + pc.name + "'");
    if (!p.skip_to_content()) p.fail(start, "print case '" + pc.name + "' has no value record (end of file)");
    const size_t h = p.pos;
    auto rec = p.parse_record();
    if (rec.first != pc.name + "_value")
      p.fail(h, "print case '" + pc.name + "' must be followed by the record '@" + pc.name + "_value', got '@" +
                    rec.first + "'");
    pc.value = make_tensor(rec.second);
    if (!p.skip_to_content() || !FixtureParser::starts_with_word(p.lines[p.pos], "@expect"))
      p.fail(p.at_end() ? p.lines.size() - 1 : p.pos, "print case '" + pc.name + "': expected '@expect <n>'");
    size_t n = p.parse_expect_line();
    pc.lines.assign(p.lines.begin() + static_cast<std::ptrdiff_t>(p.pos),
                    p.lines.begin() + static_cast<std::ptrdiff_t>(p.pos + n));
    p.pos += n;
    out.push_back(std::move(pc));
  }
  return out;
}

// ============================================================================ tensors_close
namespace {

/// One element read out of a tensor: exact integer for integral dtypes, double for floating ones.
struct Elem {
  bool integral = false;
  int64_t i = 0;
  double d = 0;
};

/// The elements of `t` in row-major order, read through its sizes and strides (no tensor op involved).
std::vector<Elem> read_elements(const Tensor& t0) {
  Tensor t = t0.is_cpu() ? t0 : t0.cpu();
  const int64_t numel = t.numel();
  std::vector<Elem> out;
  if (numel <= 0) return out;
  out.reserve(static_cast<size_t>(numel));
  const std::vector<int64_t> sizes = t.sizes().vec();
  const std::vector<int64_t> strides = t.strides().vec();
  const size_t nd = sizes.size();
  const char* base = static_cast<const char*>(t.impl()->data());
  const ScalarType dt = t.dtype();
  const size_t es = element_size(dt);
  std::vector<int64_t> idx(nd, 0);
  int64_t off = 0;  // in elements
  for (int64_t n = 0; n < numel; ++n) {
    const char* p = base + off * static_cast<int64_t>(es);
    Elem e;
    dispatch_all(dt, [&](auto tag) {
      using T = decltype(tag);
      T v;
      std::memcpy(&v, p, sizeof(T));
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
        e.d = static_cast<double>(static_cast<float>(v));
      } else if constexpr (std::is_floating_point_v<T>) {
        e.d = static_cast<double>(v);
      } else {
        e.integral = true;
        e.i = static_cast<int64_t>(v);
        e.d = static_cast<double>(e.i);
      }
    });
    out.push_back(e);
    // advance the multi-index (row-major)
    for (size_t k = nd; k-- > 0;) {
      if (++idx[k] < sizes[k]) {
        off += strides[k];
        break;
      }
      off -= strides[k] * (sizes[k] - 1);
      idx[k] = 0;
    }
  }
  return out;
}

std::string index_text(int64_t flat, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> idx(sizes.size(), 0);
  for (size_t k = sizes.size(); k-- > 0;) {
    if (sizes[k] > 0) {
      idx[k] = flat % sizes[k];
      flat /= sizes[k];
    }
  }
  return shape_text(idx);
}

std::string elem_text(const Elem& e, ScalarType dt) {
  if (e.integral) return dt == kBool ? (e.i ? "true" : "false") : std::to_string(e.i);
  return fmt_double(e.d, dt == kFloat64);
}

}  // namespace

::testing::AssertionResult tensors_close(const Tensor& actual, const Tensor& expected, double rtol, double atol,
                                         bool check_dtype) {
  if (!actual.defined() || !expected.defined()) {
    if (!actual.defined() && !expected.defined()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "tensors_close: " << (actual.defined() ? "expected" : "actual")
                                         << " is an undefined tensor";
  }
  const std::vector<int64_t> as = actual.sizes().vec(), es = expected.sizes().vec();
  const ScalarType adt = actual.dtype(), edt = expected.dtype();
  std::string dtypes = std::string(fixture_dtype_name(adt)) + " vs " + fixture_dtype_name(edt);
  if (as != es)
    return ::testing::AssertionFailure() << "tensors_close: shape mismatch: actual " << shape_text(as)
                                         << " vs expected " << shape_text(es) << " (dtypes " << dtypes << ")";
  if (check_dtype && adt != edt)
    return ::testing::AssertionFailure() << "tensors_close: dtype mismatch: actual " << fixture_dtype_name(adt)
                                         << " vs expected " << fixture_dtype_name(edt);
  const std::vector<Elem> a = read_elements(actual), e = read_elements(expected);
  int64_t bad = 0, first = -1, worst = -1;
  double worst_diff = -1;  // +inf for a nan / infinity mismatch
  for (size_t i = 0; i < a.size(); ++i) {
    bool ok;
    double diff;
    if (a[i].integral && e[i].integral) {
      long double d = static_cast<long double>(a[i].i) - static_cast<long double>(e[i].i);
      if (d < 0) d = -d;
      diff = static_cast<double>(d);
      ok = a[i].i == e[i].i ||
           d <= static_cast<long double>(atol) + static_cast<long double>(rtol) * std::fabs(static_cast<long double>(e[i].i));
    } else {
      const double x = a[i].d, y = e[i].d;
      if (std::isnan(x) || std::isnan(y)) {
        ok = std::isnan(x) && std::isnan(y);
        diff = std::numeric_limits<double>::infinity();
      } else if (std::isinf(x) || std::isinf(y)) {
        ok = x == y;
        diff = std::numeric_limits<double>::infinity();
      } else {
        diff = std::fabs(x - y);
        ok = diff <= atol + rtol * std::fabs(y);
      }
    }
    if (!ok) {
      ++bad;
      if (first < 0) first = static_cast<int64_t>(i);
      if (diff > worst_diff) {
        worst_diff = diff;
        worst = static_cast<int64_t>(i);
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  auto describe = [&](int64_t i) {
    std::ostringstream os;
    const Elem& x = a[static_cast<size_t>(i)];
    const Elem& y = e[static_cast<size_t>(i)];
    double d = (x.integral && y.integral) ? std::fabs(static_cast<double>(x.i) - static_cast<double>(y.i))
                                          : std::fabs(x.d - y.d);
    os << "index " << index_text(i, as) << ": actual " << elem_text(x, adt) << ", expected " << elem_text(y, edt)
       << ", abs diff " << fmt_double(d, false) << " (allowed "
       << fmt_double(atol + rtol * std::fabs(y.d), false) << ")";
    return os.str();
  };
  auto r = ::testing::AssertionFailure();
  r << "tensors_close: " << bad << " of " << a.size() << " elements differ (shape " << shape_text(as) << ", dtypes "
    << dtypes << ", rtol " << fmt_double(rtol, false) << ", atol " << fmt_double(atol, false) << ")\n  max abs diff at " << describe(worst);
  if (first != worst) r << "\n  first mismatch at " << describe(first);
  return r;
}

}  // namespace troupe::testing
