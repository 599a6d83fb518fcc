// Printing in PyTorch's format: `std::cout << t` and `t.str()` give exactly what Python's `str(t)` gives
// in PyTorch 1.13 (a port of torch/_tensor_str.py with its default options: precision 4, threshold
// 1000 elements, 3 edge items, line width 80).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "autograd.h"
#include "ops.h"
#include "tensor.h"

namespace troupe {
namespace {

constexpr int kPrecision = 4;
constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int64_t kLineWidth = 80;

// ---------------------------------------------------------------- reading elements

/// Reads elements of a CPU tensor by element offset from its data pointer.
struct Reader {
  const char* base;
  ScalarType dtype;

  double as_double(int64_t off) const {
    return dispatch_all(dtype, [&](auto tag) -> double {
      using T = decltype(tag);
      const T v = reinterpret_cast<const T*>(base)[off];
      return static_cast<double>(static_cast<opmath_t<T>>(v));
    });
  }
  int64_t as_int(int64_t off) const {
    return dispatch_all(dtype, [&](auto tag) -> int64_t {
      using T = decltype(tag);
      const T v = reinterpret_cast<const T*>(base)[off];
      return static_cast<int64_t>(static_cast<opmath_t<T>>(v));
    });
  }
};

// ---------------------------------------------------------------- Python's number formatting

/// Python's format(v, '.{p}f') / '.{p}e' (C's printf is correctly rounded too; only the
/// non-finite spellings differ: Python writes nan without a sign).
std::string py_format(double v, char conv, int precision) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char fmt[8] = {'%', '.', '*', conv, 0};
  int n = std::snprintf(nullptr, 0, fmt, precision, v);
  std::string s(static_cast<size_t>(n), '\0');
  std::snprintf(s.data(), s.size() + 1, fmt, precision, v);
  return s;
}

std::string pad_left(const std::string& s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

// ---------------------------------------------------------------- _Formatter

struct Formatter {
  bool floating = false;
  bool is_bool = false;
  bool int_mode = true;
  bool sci_mode = false;
  size_t max_width = 1;

  std::string format_int(int64_t v) const {
    if (is_bool) return v ? "True" : "False";
    return std::to_string(v);
  }

  /// The formatted element, padded on the left to max_width.
  std::string format(const Reader& r, int64_t off) const {
    std::string ret;
    if (floating) {
      double v = r.as_double(off);
      if (sci_mode) {
        ret = py_format(v, 'e', kPrecision);
      } else if (int_mode) {
        ret = py_format(v, 'f', 0);
        if (!(std::isinf(v) || std::isnan(v))) ret += ".";
      } else {
        ret = py_format(v, 'f', kPrecision);
      }
    } else {
      ret = format_int(r.as_int(off));
    }
    return pad_left(ret, max_width);
  }
};

/// Element offsets of the data the formatter looks at (get_summarized_data when summarising).
void collect_offsets(const Tensor& t, int64_t d, int64_t off, bool summarize, std::vector<int64_t>& out) {
  if (d == t.dim()) {
    out.push_back(off);
    return;
  }
  const int64_t n = t.sizes()[d], st = t.strides()[d];
  if (summarize && n > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; ++i) collect_offsets(t, d + 1, off + i * st, summarize, out);
    for (int64_t i = n - kEdgeItems; i < n; ++i) collect_offsets(t, d + 1, off + i * st, summarize, out);
  } else {
    for (int64_t i = 0; i < n; ++i) collect_offsets(t, d + 1, off + i * st, summarize, out);
  }
}

Formatter make_formatter(const Tensor& t, const Reader& r, bool summarize) {
  Formatter f;
  f.floating = t.is_floating_point();
  f.is_bool = t.dtype() == kBool;
  std::vector<int64_t> offs;
  collect_offsets(t, 0, 0, summarize, offs);
  if (!f.floating) {
    for (int64_t o : offs) f.max_width = std::max(f.max_width, f.format_int(r.as_int(o)).size());
    return f;
  }
  std::vector<double> vals;
  for (int64_t o : offs) {
    double v = r.as_double(o);
    if (std::isfinite(v) && v != 0) vals.push_back(v);
  }
  if (vals.empty()) return f;
  double mn = std::fabs(vals[0]), mx = mn;
  for (double v : vals) {
    mn = std::min(mn, std::fabs(v));
    mx = std::max(mx, std::fabs(v));
  }
  for (double v : vals)
    if (v != std::ceil(v)) {
      f.int_mode = false;
      break;
    }
  if (f.int_mode) {
    if (mx / mn > 1000.0 || mx > 1.0e8) {
      f.sci_mode = true;
      for (double v : vals) f.max_width = std::max(f.max_width, py_format(v, 'e', kPrecision).size());
    } else {
      for (double v : vals) f.max_width = std::max(f.max_width, py_format(v, 'f', 0).size() + 1);
    }
  } else {
    if (mx / mn > 1000.0 || mx > 1.0e8 || mn < 1.0e-4) {
      f.sci_mode = true;
      for (double v : vals) f.max_width = std::max(f.max_width, py_format(v, 'e', kPrecision).size());
    } else {
      for (double v : vals) f.max_width = std::max(f.max_width, py_format(v, 'f', kPrecision).size());
    }
  }
  return f;
}

// ---------------------------------------------------------------- _vector_str / _tensor_str_with_formatter

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) s += sep;
    s += parts[i];
  }
  return s;
}

/// "[" + s + "]", built by appending (GCC 12's -Wrestrict misreads `"[" + std::string&&`).
std::string bracketed(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '[';
  out += s;
  out += ']';
  return out;
}

/// _vector_str: a 1-D run of n elements with stride st starting at element offset off.
std::string vector_str(int64_t n, int64_t st, int64_t off, int64_t indent, bool summarize, const Formatter& f,
                       const Reader& r) {
  // length includes the comma and space between elements
  const int64_t element_length = static_cast<int64_t>(f.max_width) + 2;
  // Python: max(1, int(math.floor((linewidth - indent) / element_length)))
  int64_t per_line = static_cast<int64_t>(
      std::floor(static_cast<double>(kLineWidth - indent) / static_cast<double>(element_length)));
  per_line = std::max<int64_t>(1, per_line);
  std::vector<std::string> data;
  if (summarize && n > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; ++i) data.push_back(f.format(r, off + i * st));
    data.push_back(" ...");
    for (int64_t i = n - kEdgeItems; i < n; ++i) data.push_back(f.format(r, off + i * st));
  } else {
    for (int64_t i = 0; i < n; ++i) data.push_back(f.format(r, off + i * st));
  }
  std::vector<std::string> lines;
  const size_t step = static_cast<size_t>(per_line);
  for (size_t i = 0; i < data.size(); i += step) {
    std::vector<std::string> chunk(data.begin() + static_cast<std::ptrdiff_t>(i),
                                   data.begin() + static_cast<std::ptrdiff_t>(std::min(data.size(), i + step)));
    lines.push_back(join(chunk, ", "));
  }
  return bracketed(join(lines, ",\n" + std::string(static_cast<size_t>(indent + 1), ' ')));
}

/// `t` restricted to dims >= d at element offset `off`.
std::string tensor_str_rec(const Tensor& t, int64_t d, int64_t off, int64_t indent, bool summarize,
                           const Formatter& f, const Reader& r) {
  const int64_t dim = t.dim() - d;
  if (dim == 0) return f.format(r, off);
  if (dim == 1) return vector_str(t.sizes()[d], t.strides()[d], off, indent, summarize, f, r);
  const int64_t n = t.sizes()[d], st = t.strides()[d];
  std::vector<std::string> slices;
  if (summarize && n > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; ++i)
      slices.push_back(tensor_str_rec(t, d + 1, off + i * st, indent + 1, summarize, f, r));
    slices.push_back("...");
    for (int64_t i = n - kEdgeItems; i < n; ++i)
      slices.push_back(tensor_str_rec(t, d + 1, off + i * st, indent + 1, summarize, f, r));
  } else {
    for (int64_t i = 0; i < n; ++i)
      slices.push_back(tensor_str_rec(t, d + 1, off + i * st, indent + 1, summarize, f, r));
  }
  std::string sep = ",";
  sep.append(static_cast<size_t>(dim - 1), '\n').append(static_cast<size_t>(indent + 1), ' ');
  return bracketed(join(slices, sep));
}

/// _tensor_str for a non-empty CPU tensor.
std::string tensor_body(const Tensor& t, int64_t indent) {
  const bool summarize = t.numel() > kThreshold;
  Reader r{static_cast<const char*>(t.data_ptr()), t.dtype()};
  Formatter f = make_formatter(t, r, summarize);
  return tensor_str_rec(t, 0, 0, indent, summarize, f, r);
}

std::string add_suffixes(const std::string& tensor_str, const std::vector<std::string>& suffixes, int64_t indent) {
  std::string out = tensor_str;
  const size_t nl = tensor_str.rfind('\n');
  // Python: len(s) - s.rfind("\n") + 1, with rfind = -1 when there is no newline
  int64_t last_line_len = static_cast<int64_t>(tensor_str.size()) -
                          (nl == std::string::npos ? -1 : static_cast<int64_t>(nl)) + 1;
  for (const auto& suffix : suffixes) {
    const int64_t len = static_cast<int64_t>(suffix.size());
    if (last_line_len + len + 2 > kLineWidth) {
      out += ",\n" + std::string(static_cast<size_t>(indent), ' ') + suffix;
      last_line_len = indent + len;
    } else {
      out += ", " + suffix;
      last_line_len += len + 2;
    }
  }
  out += ")";
  return out;
}

std::string shape_tuple(IntArrayRef s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += std::to_string(s[i]);
  }
  if (s.size() == 1) r += ",";
  return r + ")";
}

std::string tensor_to_string(const Tensor& input) {
  if (!input.defined()) return "[ Tensor (undefined) ]";
  NoGradGuard no_grad;
  const std::string prefix = "tensor(";
  const int64_t indent = static_cast<int64_t>(prefix.size());
  std::vector<std::string> suffixes;
  if (!input.is_cpu()) suffixes.push_back("device='" + input.device().str() + "'");
  const ScalarType dt = input.dtype();
  const bool has_default_dtype = dt == get_default_dtype() || dt == kInt64 || dt == kBool;
  std::string body;
  if (input.numel() == 0) {
    if (input.dim() != 1) suffixes.push_back("size=" + shape_tuple(input.sizes()));
    if (dt != get_default_dtype()) suffixes.push_back(std::string("dtype=torch.") + dtype_name(dt));
    body = "[]";
  } else {
    if (!has_default_dtype) suffixes.push_back(std::string("dtype=torch.") + dtype_name(dt));
    Tensor c = input.is_cpu() ? input.detach() : input.detach().cpu();
    body = tensor_body(c, indent);
  }
  if (auto fn = input.grad_fn()) {
    suffixes.push_back("grad_fn=<" + fn->name() + ">");
  } else if (input.requires_grad()) {
    suffixes.push_back("requires_grad=True");
  }
  return add_suffixes(prefix + body, suffixes, indent);
}

}  // namespace

std::string Tensor::str() const { return tensor_to_string(*this); }

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << tensor_to_string(t); }

}  // namespace troupe
