// nn::functional pooling: the tensor library's pooling ops under torch.nn.functional's names; 1-D pooling as
// 2-D pooling of height-1 images; adaptive pooling composed of differentiable ops: averages as products with
// (out, in) averaging matrices along each dim, maxima as a max over the gathered (padded) windows.
#include <troupe/nn/functional/pooling.h>
#include <troupe/tensor/tracing.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include <troupe/tensor/ops.h>

namespace troupe::nn::functional {

Tensor max_pool2d(const Tensor& input, const MaxPool2dFuncOptions& o) {
  return troupe::max_pool2d(input, o.kernel_size(), o.stride(), o.padding(), o.dilation(), o.ceil_mode());
}

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const MaxPool2dFuncOptions& o) {
  return troupe::max_pool2d_with_indices(input, o.kernel_size(), o.stride(), o.padding(), o.dilation(), o.ceil_mode());
}

Tensor avg_pool2d(const Tensor& input, const AvgPool2dFuncOptions& o) {
  return troupe::avg_pool2d(input, o.kernel_size(), o.stride(), o.padding(), o.ceil_mode(), o.count_include_pad(),
                            o.divisor_override());
}

namespace {

void check_1d_input(const char* op, const Tensor& input) {
  if (!input.defined()) throw std::invalid_argument(std::string("[") + op + "] got an undefined tensor");
  if (input.dim() != 2 && input.dim() != 3)
    throw std::invalid_argument(std::string(op) + "() Expected 2D or 3D input tensor, but got " +
                                list_str(input.sizes()));
}

// (N, C, L) as (N, C, 1, L): MaxPool2dOptions of a 1-D pool
MaxPool2dOptions as_2d(const MaxPool1dOptions& o) {
  return MaxPool2dOptions({1, o.kernel_size()[0]})
      .stride({1, o.stride()[0]})
      .padding({0, o.padding()[0]})
      .dilation({1, o.dilation()[0]})
      .ceil_mode(o.ceil_mode());
}

}  // namespace

Tensor max_pool1d(const Tensor& input, const MaxPool1dFuncOptions& o) {
  check_1d_input("max_pool1d", input);
  return max_pool2d(input.unsqueeze(-2), as_2d(o)).squeeze(-2);
}

std::tuple<Tensor, Tensor> max_pool1d_with_indices(const Tensor& input, const MaxPool1dFuncOptions& o) {
  check_1d_input("max_pool1d", input);
  auto [out, idx] = max_pool2d_with_indices(input.unsqueeze(-2), as_2d(o));
  return {out.squeeze(-2), idx.squeeze(-2)};  // the flat index of a 1 x L plane is the index into L
}

Tensor avg_pool1d(const Tensor& input, const AvgPool1dFuncOptions& o) {
  check_1d_input("avg_pool1d", input);
  return avg_pool2d(input.unsqueeze(-2), AvgPool2dOptions({1, o.kernel_size()[0]})
                                             .stride({1, o.stride()[0]})
                                             .padding({0, o.padding()[0]})
                                             .ceil_mode(o.ceil_mode())
                                             .count_include_pad(o.count_include_pad())
                                             .divisor_override(o.divisor_override()))
      .squeeze(-2);
}

// ---------------------------------------------------------------- adaptive pooling

namespace {

// Window i of n inputs pooled to `out`: [floor(i * n / out), ceil((i + 1) * n / out)).
int64_t window_start(int64_t i, int64_t n, int64_t out) { return (i * n) / out; }
int64_t window_end(int64_t i, int64_t n, int64_t out) { return ((i + 1) * n + out - 1) / out; }

// The output sizes of an adaptive pool over the last D dims, after PyTorch's input checks.
std::vector<int64_t> adaptive_sizes(const char* op, const Tensor& input, const std::vector<std::optional<int64_t>>& out) {
  const int64_t D = static_cast<int64_t>(out.size());
  if (!input.defined()) throw std::invalid_argument(std::string("[") + op + "] got an undefined tensor");
  if (input.dim() != D + 1 && input.dim() != D + 2)
    throw std::invalid_argument(std::string(op) + "(): Expected " + std::to_string(D + 1) + "D or " +
                                std::to_string(D + 2) + "D tensor, but got " + list_str(input.sizes()));
  for (int64_t d = 1; d < input.dim(); ++d)
    if (input.size(d) == 0)
      throw std::invalid_argument(std::string(op) +
                                  "(): Expected input to have non-zero size for non-batch dimensions, but input has "
                                  "sizes " + list_str(input.sizes()) + " with dimension " + std::to_string(d) +
                                  " being empty");
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < D; ++d) {
    const int64_t in = input.size(input.dim() - D + d);
    const int64_t o = out[static_cast<size_t>(d)].value_or(in);
    if (o < 0)
      throw std::invalid_argument(std::string(op) + "(): elements of output_size must be greater than or equal to 0 "
                                  "but received " + std::to_string(o));
    sizes.push_back(o);
  }
  return sizes;
}

// (out, n) matrix whose row i averages window i, in x's dtype and device.
Tensor averaging_matrix(int64_t n, int64_t out, const Tensor& x) {
  std::vector<double> m(static_cast<size_t>(out * n), 0.0);
  for (int64_t i = 0; i < out; ++i) {
    const int64_t s = window_start(i, n, out), e = window_end(i, n, out);
    for (int64_t j = s; j < e; ++j) m[static_cast<size_t>(i * n + j)] = 1.0 / static_cast<double>(e - s);
  }
  return tensor(m, TensorOptions().dtype(kFloat64)).reshape({out, n}).to(x.device(), x.dtype());
}

Tensor adaptive_avg(const char* op, const Tensor& input, const std::vector<std::optional<int64_t>>& output_size) {
  const std::vector<int64_t> out = adaptive_sizes(op, input, output_size);
  if (!input.is_floating_point())
    throw std::invalid_argument(std::string("[") + op + "] expected a floating-point input, got " +
                                dtype_name(input.dtype()));
  const int64_t D = static_cast<int64_t>(out.size());
  Tensor y = input;
  bool changed = false;
  // last dim first: (..., n) @ (n, out) -> (..., out); an earlier dim is moved last and back
  for (int64_t k = D - 1; k >= 0; --k) {
    const int64_t d = input.dim() - D + k, n = input.size(d), o = out[static_cast<size_t>(k)];
    if (o == n) continue;  // the identity
    Tensor a = averaging_matrix(n, o, input).t();
    if (d == input.dim() - 1) y = matmul(y, a);
    else y = matmul(y.transpose(d, -1), a).transpose(d, -1);
    changed = true;
  }
  if (!changed) return input.clone();
  return y.contiguous();
}

// Max over the adaptive windows of the last D dims: the windows are gathered (index_select of the flattened
// planes) padded to the largest window by repeating each window's last row / column, so that a tie still goes
// to the first maximum in row-major order; the indices come from the same table.
std::tuple<Tensor, Tensor> adaptive_max(const char* op, const Tensor& input,
                                        const std::vector<std::optional<int64_t>>& output_size) {
  const std::vector<int64_t> out = adaptive_sizes(op, input, output_size);
  const int64_t D = static_cast<int64_t>(out.size());
  std::vector<int64_t> in(static_cast<size_t>(D)), klen(static_cast<size_t>(D), 0);
  int64_t n_out = 1, K = 1;
  for (int64_t k = 0; k < D; ++k) {
    in[k] = input.size(input.dim() - D + k);
    for (int64_t i = 0; i < out[k]; ++i)
      klen[k] = std::max(klen[k], window_end(i, in[k], out[k]) - window_start(i, in[k], out[k]));
    n_out *= out[k];
    K *= klen[k];
  }
  std::vector<int64_t> out_shape(input.sizes().begin(), input.sizes().end() - D);
  for (int64_t o : out) out_shape.push_back(o);
  if (n_out == 0) return {empty(out_shape, input.options()), empty(out_shape, input.options().dtype(kInt64))};
  // table[(output cell, window position)] = flat index into the plane
  std::vector<int64_t> table;
  table.reserve(static_cast<size_t>(n_out * K));
  std::vector<int64_t> cell(static_cast<size_t>(D), 0), pos(static_cast<size_t>(D), 0);
  for (int64_t c = 0; c < n_out; ++c) {
    for (int64_t r = c, k = D - 1; k >= 0; --k) {
      cell[k] = r % out[k];
      r /= out[k];
    }
    for (int64_t q = 0; q < K; ++q) {
      for (int64_t r = q, k = D - 1; k >= 0; --k) {
        pos[k] = r % klen[k];
        r /= klen[k];
      }
      int64_t flat = 0;
      for (int64_t k = 0; k < D; ++k) {
        const int64_t s = window_start(cell[k], in[k], out[k]), e = window_end(cell[k], in[k], out[k]);
        flat = flat * in[k] + std::min(s + pos[k], e - 1);
      }
      table.push_back(flat);
    }
  }
  Tensor idx = tensor(table).to(input.device());
  // (..., plane) -> (..., n_out * K) -> (..., n_out, K)
  std::vector<int64_t> gathered_shape(input.sizes().begin(), input.sizes().end() - D);
  gathered_shape.push_back(n_out);
  gathered_shape.push_back(K);
  Tensor windows = index_select(input.flatten(input.dim() - D), -1, idx).reshape(gathered_shape);
  auto [values, which] = max(windows, -1);
  std::vector<int64_t> expand_shape = gathered_shape;
  Tensor indices = gather(idx.reshape({n_out, K}).expand(expand_shape), -1, which.unsqueeze(-1)).squeeze(-1);
  return {values.reshape(out_shape), indices.reshape(out_shape)};
}

}  // namespace

Tensor adaptive_avg_pool1d(const Tensor& input, const AdaptiveAvgPool1dFuncOptions& o) {
  return adaptive_avg("adaptive_avg_pool1d", input, {o.output_size()[0]});
}

Tensor adaptive_avg_pool2d(const Tensor& input, const AdaptiveAvgPool2dFuncOptions& o) {
  if (auto* tracer = tracing::state(); tracer != nullptr && input.dim() >= 2) {
    std::vector<int64_t> size(2);
    for (int i = 0; i < 2; ++i) size[i] = o.output_size()[i] ? *o.output_size()[i] : input.size(input.dim() - 2 + i);
    return tracing::record(tracer, "aten::adaptive_avg_pool2d", {input, size},
                           [&] { return adaptive_avg_pool2d(input, AdaptiveAvgPool2dFuncOptions({size[0], size[1]})); });
  }
  return adaptive_avg("adaptive_avg_pool2d", input, {o.output_size()[0], o.output_size()[1]});
}

Tensor adaptive_max_pool1d(const Tensor& input, const AdaptiveMaxPool1dFuncOptions& o) {
  return std::get<0>(adaptive_max_pool1d_with_indices(input, o));
}

std::tuple<Tensor, Tensor> adaptive_max_pool1d_with_indices(const Tensor& input,
                                                            const AdaptiveMaxPool1dFuncOptions& o) {
  return adaptive_max("adaptive_max_pool1d", input, {o.output_size()[0]});
}

Tensor adaptive_max_pool2d(const Tensor& input, const AdaptiveMaxPool2dFuncOptions& o) {
  return std::get<0>(adaptive_max_pool2d_with_indices(input, o));
}

std::tuple<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& input,
                                                            const AdaptiveMaxPool2dFuncOptions& o) {
  return adaptive_max("adaptive_max_pool2d", input, {o.output_size()[0], o.output_size()[1]});
}

}  // namespace troupe::nn::functional
