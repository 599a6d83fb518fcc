// nn::functional layer_norm, batch_norm, group_norm and instance_norm as compositions of tensor ops (autograd
// gives the backward).
#include <troupe/nn/functional/normalization.h>
#include <troupe/tensor/tracing.h>

#include <stdexcept>
#include <string>
#include <vector>

#include <troupe/tensor/autograd.h>
#include <troupe/tensor/ops.h>

namespace troupe::nn::functional {

Tensor layer_norm(const Tensor& input, const LayerNormFuncOptions& options) {
  TROUPE_TRACE_OP("aten::layer_norm", layer_norm(input, options), input, options.normalized_shape(), options.weight(),
                  options.bias(), options.eps(), true);
  const IntArrayRef normalized_shape = options.normalized_shape();
  const Tensor &weight = options.weight(), &bias = options.bias();
  const double eps = options.eps();
  if (!input.defined()) throw std::invalid_argument("[layer_norm] got an undefined tensor");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  if (k < 1)
    throw std::invalid_argument(
        "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, but got "
        "normalized_shape = " + list_str(normalized_shape));
  if (weight.defined() && !weight.sizes().equals(normalized_shape))
    throw std::invalid_argument("Expected weight to be of same shape as normalized_shape, but got weight of shape " +
                                list_str(weight.sizes()) + " and normalized_shape = " + list_str(normalized_shape));
  if (bias.defined() && !bias.sizes().equals(normalized_shape))
    throw std::invalid_argument("Expected bias to be of same shape as normalized_shape, but got bias of shape " +
                                list_str(bias.sizes()) + " and normalized_shape = " + list_str(normalized_shape));
  const int64_t nd = input.dim();
  if (nd < k || !IntArrayRef(input.sizes().data() + (nd - k), static_cast<size_t>(k)).equals(normalized_shape)) {
    std::string s = "Given normalized_shape=" + list_str(normalized_shape) + ", expected input with shape [*";
    for (int64_t v : normalized_shape) s += ", " + std::to_string(v);
    throw std::invalid_argument(s + "], but got input of size" + list_str(input.sizes()));
  }
  if (!input.is_floating_point())
    throw std::invalid_argument(std::string("[layer_norm] expected a floating-point input, got ") +
                                dtype_name(input.dtype()));
  std::vector<int64_t> dims;
  for (int64_t d = nd - k; d < nd; ++d) dims.push_back(d);
  // (*, normalized) -> mean, var (*, 1...1); y = (x - mean) * rsqrt(var + eps) [* weight] [+ bias]
  auto [var, mean] = var_mean(input, dims, /*unbiased=*/false, /*keepdim=*/true);
  Tensor y = (input - mean) * rsqrt(var + eps);
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return y;
}

namespace {

void check_channels(const char* name, int64_t expected, const Tensor& t) {
  if (t.defined() && t.numel() != expected)
    throw std::invalid_argument(std::string(name) + " should contain " + std::to_string(expected) +
                                " elements not " + std::to_string(t.numel()));
}

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const BatchNormFuncOptions& options) {
  TROUPE_TRACE_OP("aten::batch_norm", batch_norm(input, running_mean, running_var, options), input, options.weight(),
                  options.bias(), running_mean, running_var, options.training(),
                  options.momentum() ? IValue(*options.momentum()) : IValue(), options.eps(), true);
  const Tensor &weight = options.weight(), &bias = options.bias();
  const bool training = options.training();
  const double eps = options.eps();
  if (!input.defined()) throw std::invalid_argument("[batch_norm] got an undefined tensor");
  if (input.dim() < 2)
    throw std::invalid_argument("[batch_norm] expected an input of shape (N, C, *) with at least 2 dims, got shape " +
                                shape_str(input.sizes()));
  if (!input.is_floating_point())
    throw std::invalid_argument(std::string("[batch_norm] expected a floating-point input, got ") +
                                dtype_name(input.dtype()));
  const int64_t C = input.size(1);
  if (training) {
    // PyTorch: size[0] * prod(size[2:]) must not be 1
    int64_t per_channel = input.size(0);
    for (int64_t d = 2; d < input.dim(); ++d) per_channel *= input.size(d);
    if (per_channel == 1)
      throw std::invalid_argument("Expected more than 1 value per channel when training, got input size " +
                                  list_str(input.sizes()));
  }
  check_channels("running_mean", C, running_mean);
  if (!running_mean.defined() && !training) throw std::invalid_argument("running_mean must be defined in evaluation mode");
  check_channels("running_var", C, running_var);
  if (!running_var.defined() && !training) throw std::invalid_argument("running_var must be defined in evaluation mode");
  check_channels("weight", C, weight);
  check_channels("bias", C, bias);

  if (input.numel() == 0) return input.clone();  // PyTorch: an empty output, running stats untouched

  // per-channel statistics broadcast as (1, C, 1, ...)
  std::vector<int64_t> stat_shape(static_cast<size_t>(input.dim()), 1);
  stat_shape[1] = C;
  Tensor mean, invstd;
  if (training) {
    std::vector<int64_t> dims{0};
    for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
    auto [var, m] = var_mean(input, dims, /*unbiased=*/false, /*keepdim=*/true);
    mean = m;
    invstd = rsqrt(var + eps);
    if (running_mean.defined() || running_var.defined()) {
      if (!options.momentum())
        throw std::invalid_argument("[batch_norm] momentum is nullopt: give a value to update the running statistics");
      const double momentum = *options.momentum();
      NoGradGuard no_grad;
      const int64_t n = input.numel() / C;
      if (running_mean.defined()) {
        Tensor bm = mean.detach().reshape({C}).to(running_mean.dtype());
        Tensor rm = running_mean;  // a handle: the caller's buffer is updated in place
        rm.copy_(bm * momentum + rm * (1 - momentum));
      }
      if (running_var.defined()) {
        // the running variance uses the unbiased estimate var * n / (n - 1)
        Tensor uv = (var.detach().reshape({C}) * (static_cast<double>(n) / static_cast<double>(n - 1)))
                        .to(running_var.dtype());
        Tensor rv = running_var;
        rv.copy_(uv * momentum + rv * (1 - momentum));
      }
    }
  } else {
    mean = running_mean.reshape(stat_shape).to(input.dtype());
    invstd = rsqrt(running_var.reshape(stat_shape).to(input.dtype()) + eps);
  }
  // y = x * alpha + beta with alpha = invstd * weight, beta = bias - mean * alpha (PyTorch's CPU form)
  Tensor alpha = weight.defined() ? invstd * weight.reshape(stat_shape) : invstd;
  Tensor beta = bias.defined() ? bias.reshape(stat_shape) - mean * alpha : -(mean * alpha);
  return input * alpha + beta;
}

Tensor group_norm(const Tensor& input, const GroupNormFuncOptions& options) {
  const int64_t G = options.num_groups();
  const Tensor &weight = options.weight(), &bias = options.bias();
  if (!input.defined()) throw std::invalid_argument("[group_norm] got an undefined tensor");
  if (input.dim() < 2)
    throw std::invalid_argument("Expected at least 2 dimensions for input tensor but received " +
                                std::to_string(input.dim()));
  if (!input.is_floating_point())
    throw std::invalid_argument(std::string("[group_norm] expected a floating-point input, got ") +
                                dtype_name(input.dtype()));
  const int64_t N = input.size(0), C = input.size(1);
  if (G <= 0 || C % G != 0)
    throw std::invalid_argument("Expected number of channels in input to be divisible by num_groups, but got input "
                                "of shape " + list_str(input.sizes()) + " and num_groups=" + std::to_string(G));
  int64_t spatial = 1;
  for (int64_t d = 2; d < input.dim(); ++d) spatial *= input.size(d);
  if (N * (C / G) * spatial == 1) {
    std::vector<int64_t> size{N * C / G, G};
    for (int64_t d = 2; d < input.dim(); ++d) size.push_back(input.size(d));
    throw std::invalid_argument("Expected more than 1 value per channel when training, got input size " +
                                list_str(size));
  }
  for (const Tensor* t : {&weight, &bias})
    if (t->defined() && (t->dim() != 1 || t->numel() != C))
      throw std::invalid_argument(std::string("Expected ") + (t == &weight ? "weight" : "bias") +
                                  " to be a vector of size equal to the number of channels in input, but got " +
                                  (t == &weight ? "weight" : "bias") + " of shape " + list_str(t->sizes()) +
                                  " and input of shape " + list_str(input.sizes()));
  // (N, C, *) -> (N, G, C/G * prod(*)): each row normalised by its mean and biased variance
  Tensor x = input.reshape({N, G, -1});
  auto [var, mean] = var_mean(x, {2}, /*unbiased=*/false, /*keepdim=*/true);
  Tensor y = ((x - mean) * rsqrt(var + options.eps())).reshape(input.sizes());
  std::vector<int64_t> stat_shape(static_cast<size_t>(input.dim()), 1);
  stat_shape[1] = C;
  if (weight.defined()) y = y * weight.reshape(stat_shape);
  if (bias.defined()) y = y + bias.reshape(stat_shape);
  return y;
}

Tensor instance_norm(const Tensor& input, const InstanceNormFuncOptions& options) {
  const bool use_input_stats = options.use_input_stats();
  const Tensor &running_mean = options.running_mean(), &running_var = options.running_var();
  if (!input.defined()) throw std::invalid_argument("[instance_norm] got an undefined tensor");
  if (input.dim() < 2)
    throw std::invalid_argument("[instance_norm] expected an input of shape (N, C, *) with at least 2 dims, got shape " +
                                shape_str(input.sizes()));
  if (use_input_stats) {
    int64_t spatial = 1;
    for (int64_t d = 2; d < input.dim(); ++d) spatial *= input.size(d);
    if (spatial == 1)
      throw std::invalid_argument("Expected more than 1 spatial element when training, got input size " +
                                  list_str(input.sizes()));
  }
  if (!use_input_stats && (!running_mean.defined() || !running_var.defined()))
    throw std::invalid_argument("Expected running_mean and running_var to be defined when use_input_stats is false");
  const int64_t N = input.size(0), C = input.size(1);
  check_channels("weight", C, options.weight());
  check_channels("bias", C, options.bias());
  check_channels("running_mean", C, running_mean);
  check_channels("running_var", C, running_var);
  // (N, C, *) as one sample of N*C channels; the per-channel tensors repeated N times
  auto repeat_n = [N](const Tensor& t) { return t.defined() ? t.repeat({N}) : Tensor(); };
  std::vector<int64_t> shape = input.sizes().vec();
  shape[0] = 1;
  shape[1] = N * C;
  Tensor rm = repeat_n(running_mean), rv = repeat_n(running_var);
  Tensor out = batch_norm(input.reshape(shape), rm, rv,
                          BatchNormFuncOptions()
                              .weight(repeat_n(options.weight()))
                              .bias(repeat_n(options.bias()))
                              .training(use_input_stats)
                              .momentum(options.momentum())
                              .eps(options.eps()));
  if (use_input_stats) {
    NoGradGuard no_grad;
    if (running_mean.defined()) {
      Tensor m = running_mean;  // a handle: the caller's buffer is updated in place
      m.copy_(rm.reshape({N, C}).mean({0}));
    }
    if (running_var.defined()) {
      Tensor v = running_var;
      v.copy_(rv.reshape({N, C}).mean({0}));
    }
  }
  return out.reshape(input.sizes());
}

}  // namespace troupe::nn::functional
