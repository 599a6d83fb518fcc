// torch.optim.swa_utils: AveragedModel (stochastic weight averaging and exponential moving averages of
// a model's parameters), the averaging functions, and update_bn. SWALR is in nn/optim/swalr.h.
//
//   auto swa_model = std::make_shared<swa_utils::AveragedModel>(model);
//   for (...) { train(model); swa_model->update_parameters(*model); }
//   swa_utils::update_bn(loader, *swa_model);
//
//   swa_utils::AveragedModel ema(model, std::nullopt, nullptr, swa_utils::get_ema_multi_avg_fn(0.999));
//
// The averaging functions compute, element by element in the tensor's dtype,
//   SWA: averaged + (current - averaged) / (n + 1)       EMA: decay * averaged + (1 - decay) * current
// exactly as PyTorch's get_swa_avg_fn / get_ema_avg_fn (and 1.13's default avg_fn), so the "multi"
// versions agree with them to the last bit. (PyTorch 2's multi versions use torch.lerp, which may
// round differently in the last bit.) The multi versions update a list of tensors in place, one fused
// pass per contiguous float32/float64 CPU tensor, with no temporaries.
#pragma once

#include <concepts>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <troupe/nn/module.h>
#include <troupe/optim/swalr.h>  // SWALR lives in swa_utils too, as in PyTorch
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/tensor.h>

namespace troupe::nn {
class BatchNormBase;
}  // namespace troupe::nn

namespace troupe::optim::swa_utils {

/// avg_fn(averaged, current, num_averaged) -> the new averaged value; num_averaged is the n_averaged
/// tensor (int64 scalar) on the averaged tensor's device.
using AvgFn = std::function<Tensor(const Tensor& averaged, const Tensor& current, const Tensor& num_averaged)>;
/// multi_avg_fn(averaged, current, num_averaged): updates every tensor of `averaged` in place.
using MultiAvgFn =
    std::function<void(std::vector<Tensor>& averaged, const std::vector<Tensor>& current, const Tensor& num_averaged)>;

/// decay * averaged + (1 - decay) * current (num_averaged is ignored: no bias correction). Throws
/// "Invalid decay value {decay} provided. Please provide a value in [0,1] range." outside [0, 1].
AvgFn get_ema_avg_fn(double decay = 0.999);
/// averaged + (current - averaged) / (num_averaged + 1): the running mean.
AvgFn get_swa_avg_fn();
/// get_ema_avg_fn's update, in place over lists of tensors; same decay check.
MultiAvgFn get_ema_multi_avg_fn(double decay = 0.999);
/// get_swa_avg_fn's update, in place over lists of tensors.
MultiAvgFn get_swa_multi_avg_fn();

/// Keeps a deep copy of a model whose parameters (and, with use_buffers, buffers) are a running
/// average of the model's (torch.optim.swa_utils.AveragedModel).
class AveragedModel : public nn::Module {
 public:
  /// Copies `model` (model->clone(device)) as the child "module" and registers the buffer
  /// "n_averaged" (int64 0), so state_dict keys are "n_averaged", "module.<name>". avg_fn and
  /// multi_avg_fn are alternatives (both: error); with neither, the equal-weight SWA average.
  explicit AveragedModel(nn::ModulePtr model, std::optional<Device> device = std::nullopt, AvgFn avg_fn = nullptr,
                         MultiAvgFn multi_avg_fn = nullptr, bool use_buffers = false);

  /// Averages `model`'s parameters (and buffers with use_buffers) into the copy; the first call
  /// copies them. Without use_buffers the copy's buffers are copied from `model`. Then n_averaged += 1.
  void update_parameters(const nn::Module& model);

  /// The averaged copy of the model.
  const nn::ModulePtr& module() const { return module_; }
  /// Calls the averaged copy.
  Tensor forward(const Tensor& input) override;
  /// Calls the averaged copy with any arguments.
  nn::Value forward_args(const nn::Args& args, const nn::Kwargs& kwargs) override;
  std::string name() const override { return "AveragedModel"; }

  /// Number of models averaged so far (int64 scalar buffer "n_averaged").
  Tensor n_averaged;
  /// The averaging function given (not saved in the state_dict), or null.
  AvgFn avg_fn;
  /// The in-place averaging function given (not saved in the state_dict), or null.
  MultiAvgFn multi_avg_fn;
  /// Average the buffers too (else they are copied from the model).
  bool use_buffers;

 private:
  nn::ModulePtr module_;
};

namespace detail {
/// What update_bn changes and restores: the BatchNorm modules found, their momenta and the model's
/// training flag.
class UpdateBnScope {
 public:
  /// Finds every BatchNorm module of `model`, resets its running statistics, sets momentum to None
  /// (a cumulative average) and puts the model in training mode.
  explicit UpdateBnScope(nn::Module& model);
  /// Restores the momenta and the training flag.
  ~UpdateBnScope();
  UpdateBnScope(const UpdateBnScope&) = delete;
  UpdateBnScope& operator=(const UpdateBnScope&) = delete;
  /// False when the model has no BatchNorm module (update_bn then does nothing).
  bool active() const { return !momenta_.empty(); }

 private:
  nn::Module& model_;
  bool was_training_ = false;
  std::vector<std::pair<nn::BatchNormBase*, std::optional<double>>> momenta_;
};

template <class B>
concept HasDataMember = requires(const B& b) {
  { b.data } -> std::convertible_to<const Tensor&>;
};
template <class T> struct is_pair_or_tuple : std::false_type {};
template <class A, class B> struct is_pair_or_tuple<std::pair<A, B>> : std::true_type {};
template <class... A> struct is_pair_or_tuple<std::tuple<A...>> : std::true_type {};

/// The model input of one batch: the batch itself (a Tensor), its `data` member (data::Example), or the
/// first element of a pair, tuple or vector of tensors.
template <class B>
Tensor batch_input(const B& batch) {
  using T = std::decay_t<B>;
  if constexpr (std::is_convertible_v<const T&, const Tensor&>) {
    return batch;
  } else if constexpr (HasDataMember<T>) {
    return batch.data;
  } else if constexpr (is_pair_or_tuple<T>::value) {
    return std::get<0>(batch);
  } else if constexpr (std::is_same_v<T, std::vector<Tensor>>) {
    if (batch.empty()) throw std::invalid_argument("[update_bn] a batch is an empty list of tensors");
    return batch.front();
  } else {
    static_assert(sizeof(T) == 0,
                  "update_bn: a batch must be a Tensor, have a `data` member, or be a pair, tuple or "
                  "vector whose first element is the input");
  }
}
}  // namespace detail

/// Recomputes the BatchNorm running statistics of `model` with one pass over `loader`
/// (torch.optim.swa_utils.update_bn): the statistics are reset, momentum set to None (so they become
/// the cumulative average over the batches) and the model run in training mode without autograd on
/// each batch's input (moved to `device` when given); momenta and the training flag are restored.
/// Nothing happens when the model has no BatchNorm.
template <class Loader>
void update_bn(Loader& loader, nn::Module& model, std::optional<Device> device = std::nullopt) {
  detail::UpdateBnScope scope(model);
  if (!scope.active()) return;
  NoGradGuard no_grad;
  for (auto&& batch : loader) {
    Tensor input = detail::batch_input(batch);
    if (device) input = input.to(*device);
    model(input);
  }
}

}  // namespace troupe::optim::swa_utils
