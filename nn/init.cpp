// nn::init (torch/nn/init.py of PyTorch 1.13): the same formulas, checks and random draws.
#include <troupe/nn/init.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>
#include <vector>

#include <troupe/nn/module.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/warning.h>

namespace troupe::nn::init {

namespace {

void check_defined(const Tensor& t, const char* fn) {
  if (!t.defined()) throw std::invalid_argument(std::string("[") + fn + "] got an undefined tensor");
}


// _calculate_correct_fan: mode is compared in lower case.
int64_t calculate_correct_fan(const Tensor& tensor, const FanMode& mode) {
  std::string m = mode;
  std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (m != "fan_in" && m != "fan_out")
    throw std::invalid_argument("Mode " + m + " not supported, please use one of ['fan_in', 'fan_out']");
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  return m == "fan_in" ? fan_in : fan_out;
}

bool has_zero_dim(const Tensor& t) {
  for (int64_t s : t.sizes())
    if (s == 0) return true;
  return false;
}

// Householder QR of the row-major m x n matrix `a` (m >= n), in place: returns the reduced Q
// (m x n, row-major) and leaves R's diagonal in `rdiag`. R's diagonal may have either sign.
std::vector<double> householder_q(std::vector<double>& a, int64_t m, int64_t n, std::vector<double>& rdiag) {
  std::vector<std::vector<double>> vs(static_cast<size_t>(n));  // reflectors v (v[0] = 1), for rows k..m-1
  std::vector<double> taus(static_cast<size_t>(n), 0.0);
  rdiag.assign(static_cast<size_t>(n), 0.0);
  auto A = [&](int64_t i, int64_t j) -> double& { return a[static_cast<size_t>(i * n + j)]; };
  for (int64_t k = 0; k < n; ++k) {
    double norm2 = 0;
    for (int64_t i = k; i < m; ++i) norm2 += A(i, k) * A(i, k);
    const double alpha = A(k, k);
    const double norm = std::sqrt(norm2);
    std::vector<double>& v = vs[static_cast<size_t>(k)];
    v.assign(static_cast<size_t>(m - k), 0.0);
    v[0] = 1.0;
    if (norm == 0) {  // a zero column: H = I, R[k][k] = 0
      rdiag[static_cast<size_t>(k)] = 0;
      continue;
    }
    const double beta = -std::copysign(norm, alpha);
    const double v0 = alpha - beta;
    for (int64_t i = k + 1; i < m; ++i) v[static_cast<size_t>(i - k)] = A(i, k) / v0;
    const double tau = (beta - alpha) / beta;
    taus[static_cast<size_t>(k)] = tau;
    rdiag[static_cast<size_t>(k)] = beta;
    // A[k:, k+1:] -= tau v (v^T A[k:, k+1:])
    for (int64_t j = k + 1; j < n; ++j) {
      double s = 0;
      for (int64_t i = k; i < m; ++i) s += v[static_cast<size_t>(i - k)] * A(i, j);
      s *= tau;
      for (int64_t i = k; i < m; ++i) A(i, j) -= s * v[static_cast<size_t>(i - k)];
    }
  }
  // Q = H_0 H_1 ... H_{n-1} I[:, :n], applied right to left.
  std::vector<double> q(static_cast<size_t>(m * n), 0.0);
  for (int64_t j = 0; j < n; ++j) q[static_cast<size_t>(j * n + j)] = 1.0;
  for (int64_t k = n - 1; k >= 0; --k) {
    const std::vector<double>& v = vs[static_cast<size_t>(k)];
    const double tau = taus[static_cast<size_t>(k)];
    if (tau == 0) continue;
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t i = k; i < m; ++i) s += v[static_cast<size_t>(i - k)] * q[static_cast<size_t>(i * n + j)];
      s *= tau;
      for (int64_t i = k; i < m; ++i) q[static_cast<size_t>(i * n + j)] -= s * v[static_cast<size_t>(i - k)];
    }
  }
  return q;
}

}  // namespace

double calculate_gain(const Nonlinearity& nonlinearity, std::optional<double> param) {
  static const char* const linear_fns[] = {"linear",           "conv1d",           "conv2d",          "conv3d",
                                           "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"};
  for (const char* f : linear_fns)
    if (nonlinearity == f) return 1.0;
  if (nonlinearity == "sigmoid") return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") {
    const double negative_slope = param.value_or(0.01);
    return std::sqrt(2.0 / (1 + std::pow(negative_slope, 2)));
  }
  if (nonlinearity == "selu") return 3.0 / 4;  // found empirically (pytorch/pytorch#50664)
  throw std::invalid_argument("Unsupported nonlinearity " + nonlinearity);
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor) {
  check_defined(tensor, "calculate_fan_in_and_fan_out");
  if (tensor.dim() < 2)
    throw std::invalid_argument("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions");
  const int64_t num_input_fmaps = tensor.size(1);
  const int64_t num_output_fmaps = tensor.size(0);
  int64_t receptive_field_size = 1;
  for (int64_t d = 2; d < tensor.dim(); ++d) receptive_field_size *= tensor.size(d);
  return {num_input_fmaps * receptive_field_size, num_output_fmaps * receptive_field_size};
}

Tensor uniform_(Tensor tensor, double a, double b) {
  check_defined(tensor, "uniform_");
  if (initialization_skipped()) return tensor;
  NoGradGuard no_grad;
  tensor.uniform_(a, b);
  return tensor;
}

Tensor normal_(Tensor tensor, double mean, double std) {
  check_defined(tensor, "normal_");
  if (initialization_skipped()) return tensor;
  NoGradGuard no_grad;
  tensor.normal_(mean, std);
  return tensor;
}

Tensor constant_(Tensor tensor, Scalar value) {
  check_defined(tensor, "constant_");
  if (initialization_skipped()) return tensor;
  NoGradGuard no_grad;
  tensor.fill_(value);
  return tensor;
}

Tensor ones_(Tensor tensor) {
  check_defined(tensor, "ones_");
  if (initialization_skipped()) return tensor;
  NoGradGuard no_grad;
  tensor.fill_(1.0);
  return tensor;
}

Tensor zeros_(Tensor tensor) {
  check_defined(tensor, "zeros_");
  if (initialization_skipped()) return tensor;
  NoGradGuard no_grad;
  tensor.zero_();
  return tensor;
}

Tensor eye_(Tensor tensor) {
  check_defined(tensor, "eye_");
  if (tensor.dim() != 2) throw std::invalid_argument("Only tensors with 2 dimensions are supported");
  if (initialization_skipped()) return tensor;
  NoGradGuard no_grad;
  tensor.copy_(eye(tensor.size(0), tensor.size(1), tensor.options()));
  return tensor;
}

Tensor xavier_uniform_(Tensor tensor, double gain) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  const double a = std::sqrt(3.0) * std;  // uniform bounds from the standard deviation
  return init::uniform_(tensor, -a, a);
}

Tensor xavier_normal_(Tensor tensor, double gain) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  return init::normal_(tensor, 0., std);
}

Tensor kaiming_uniform_(Tensor tensor, double a, const FanMode& mode, const Nonlinearity& nonlinearity) {
  check_defined(tensor, "kaiming_uniform_");
  if (has_zero_dim(tensor)) {
    TROUPE_WARN_ONCE("Initializing zero-element tensors is a no-op");  // Python's filter: once per call site
    return tensor;
  }
  const int64_t fan = calculate_correct_fan(tensor, mode);
  const double gain = calculate_gain(nonlinearity, a);
  const double std = gain / std::sqrt(static_cast<double>(fan));
  const double bound = std::sqrt(3.0) * std;  // uniform bounds from the standard deviation
  return init::uniform_(tensor, -bound, bound);
}

Tensor kaiming_normal_(Tensor tensor, double a, const FanMode& mode, const Nonlinearity& nonlinearity) {
  check_defined(tensor, "kaiming_normal_");
  if (has_zero_dim(tensor)) {
    TROUPE_WARN_ONCE("Initializing zero-element tensors is a no-op");  // Python's filter: once per call site
    return tensor;
  }
  const int64_t fan = calculate_correct_fan(tensor, mode);
  const double gain = calculate_gain(nonlinearity, a);
  const double std = gain / std::sqrt(static_cast<double>(fan));
  return init::normal_(tensor, 0, std);
}

Tensor orthogonal_(Tensor tensor, double gain) {
  check_defined(tensor, "orthogonal_");
  if (tensor.dim() < 2) throw std::invalid_argument("Only tensors with 2 or more dimensions are supported");
  if (tensor.numel() == 0) return tensor;  // no-op
  if (initialization_skipped()) return tensor;
  NoGradGuard no_grad;
  const int64_t rows = tensor.size(0);
  const int64_t cols = tensor.numel() / rows;
  // The normal draw in the tensor's own dtype, as PyTorch's tensor.new(rows, cols).normal_(0, 1).
  Tensor flattened = empty({rows, cols}, tensor.options());
  flattened.normal_(0, 1);
  const bool wide = rows < cols;
  if (wide) flattened = flattened.t();
  const int64_t m = flattened.size(0), n = flattened.size(1);  // m >= n
  std::vector<double> a = flattened.to_vector<double>();
  std::vector<double> rdiag;
  std::vector<double> q = householder_q(a, m, n, rdiag);
  // Make Q uniform (arXiv:math-ph/0609050): scale column j by sign(R[j][j]).
  for (int64_t j = 0; j < n; ++j) {
    const double d = rdiag[static_cast<size_t>(j)];
    const double ph = d > 0 ? 1.0 : (d < 0 ? -1.0 : 0.0);
    for (int64_t i = 0; i < m; ++i) q[static_cast<size_t>(i * n + j)] *= ph;
  }
  Tensor qt = troupe::tensor(q, TensorOptions().dtype(kFloat64)).view({m, n});
  if (wide) qt = qt.t();
  tensor.view({rows, cols}).copy_(qt.to(tensor.device(), tensor.dtype()));
  tensor.mul_(gain);
  return tensor;
}

Tensor dirac_(Tensor tensor, int64_t groups) {
  check_defined(tensor, "dirac_");
  const int64_t dims = tensor.dim();
  if (dims < 3 || dims > 5) throw std::invalid_argument("Only tensors with 3, 4, or 5 dimensions are supported");
  if (groups <= 0 || tensor.size(0) % groups != 0) throw std::invalid_argument("dim 0 must be divisible by groups");
  if (initialization_skipped()) return tensor;
  NoGradGuard no_grad;
  const int64_t out_chans_per_grp = tensor.size(0) / groups;
  const int64_t min_dim = std::min(out_chans_per_grp, tensor.size(1));
  tensor.zero_();
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t d = 0; d < min_dim; ++d) {
      // tensor[g * out_chans_per_grp + d, d, k2 // 2, ...] = 1
      Tensor e = tensor.select(0, g * out_chans_per_grp + d).select(0, d);
      for (int64_t k = 2; k < dims; ++k) e = e.select(0, tensor.size(k) / 2);
      e.fill_(1);
    }
  return tensor;
}

Tensor sparse_(Tensor tensor, double sparsity, double std) {
  check_defined(tensor, "sparse_");
  if (tensor.dim() != 2) throw std::invalid_argument("Only tensors with 2 dimensions are supported");
  if (initialization_skipped()) return tensor;
  const int64_t rows = tensor.size(0), cols = tensor.size(1);
  const auto num_zeros = static_cast<int64_t>(std::ceil(sparsity * static_cast<double>(rows)));
  NoGradGuard no_grad;
  tensor.normal_(0, std);
  for (int64_t c = 0; c < cols; ++c) {
    // the first num_zeros rows of a random permutation, as PyTorch (one randperm per column)
    const std::vector<int64_t> perm = randperm(rows).to_vector<int64_t>();
    Tensor column = tensor.select(1, c);
    for (int64_t i = 0; i < std::min(num_zeros, rows); ++i) column.select(0, perm[static_cast<size_t>(i)]).fill_(0);
  }
  return tensor;
}

}  // namespace troupe::nn::init
