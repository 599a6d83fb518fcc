// torch.optim.swa_utils (PyTorch 2's AveragedModel with avg_fn / multi_avg_fn, the get_*_avg_fn
// helpers, update_bn). The multi averaging functions make one pass per contiguous float32/float64 CPU
// tensor over raw pointers (read averaged, read current, write averaged: 12 bytes per float32
// element), in the same order of operations as the single-tensor functions.
#include <troupe/optim/swa_utils.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include <troupe/nn/modules/batchnorm.h>
#include <troupe/util/python_format.h>
#include <troupe/tensor/ops.h>
#include <troupe/tensor/parallel.h>

namespace troupe::optim::swa_utils {

namespace {

void check_decay(double decay) {
  if (!(decay >= 0.0 && decay <= 1.0))
    throw std::invalid_argument("Invalid decay value " + util::py_float(decay) +
                                " provided. Please provide a value in [0,1] range.");
}

// True when `avg` and `cur` can be updated by the raw-pointer loops: contiguous CPU tensors of one
// floating dtype (float32 or float64) and one shape.
bool fusable(const Tensor& avg, const Tensor& cur) {
  if (!avg.is_cpu() || !cur.is_cpu() || !avg.is_contiguous() || !cur.is_contiguous()) return false;
  if (avg.dtype() != cur.dtype() || (avg.dtype() != kFloat32 && avg.dtype() != kFloat64)) return false;
  return avg.sizes() == cur.sizes();
}

// avg[i] = avg[i] + (cur[i] - avg[i]) / denom: get_swa_avg_fn's three roundings, in one pass.
template <class T>
void swa_update(T* __restrict avg, const T* __restrict cur, int64_t n, T denom) {
  parallel_for(0, n, kGrainSize, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) avg[i] = avg[i] + (cur[i] - avg[i]) / denom;
  });
}

// avg[i] = decay * avg[i] + one_minus_decay * cur[i]: get_ema_avg_fn's roundings, in one pass.
template <class T>
void ema_update(T* __restrict avg, const T* __restrict cur, int64_t n, T decay, T one_minus_decay) {
  parallel_for(0, n, kGrainSize, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) avg[i] = decay * avg[i] + one_minus_decay * cur[i];
  });
}

void check_lists(const std::vector<Tensor>& averaged, const std::vector<Tensor>& current, const char* fn) {
  if (averaged.size() != current.size())
    throw std::invalid_argument(std::string("[") + fn + "] got " + std::to_string(averaged.size()) +
                                " averaged tensors but " + std::to_string(current.size()) + " current ones");
}

}  // namespace

AvgFn get_ema_avg_fn(double decay) {
  check_decay(decay);
  return [decay](const Tensor& averaged, const Tensor& current, const Tensor&) {
    NoGradGuard no_grad;
    return decay * averaged + (1 - decay) * current;
  };
}

AvgFn get_swa_avg_fn() {
  return [](const Tensor& averaged, const Tensor& current, const Tensor& num_averaged) {
    NoGradGuard no_grad;
    return averaged + (current - averaged) / (num_averaged + 1);
  };
}

MultiAvgFn get_ema_multi_avg_fn(double decay) {
  check_decay(decay);
  return [decay](std::vector<Tensor>& averaged, const std::vector<Tensor>& current, const Tensor&) {
    check_lists(averaged, current, "ema_multi_avg_fn");
    NoGradGuard no_grad;
    for (size_t i = 0; i < averaged.size(); ++i) {
      Tensor& a = averaged[i];
      const Tensor& c = current[i];
      if (fusable(a, c)) {
        if (a.dtype() == kFloat32)
          ema_update(a.data_ptr<float>(), c.data_ptr<float>(), a.numel(), static_cast<float>(decay),
                     static_cast<float>(1 - decay));
        else
          ema_update(a.data_ptr<double>(), c.data_ptr<double>(), a.numel(), decay, 1 - decay);
      } else {
        a.copy_(decay * a + (1 - decay) * c);
      }
    }
  };
}

MultiAvgFn get_swa_multi_avg_fn() {
  return [](std::vector<Tensor>& averaged, const std::vector<Tensor>& current, const Tensor& num_averaged) {
    check_lists(averaged, current, "swa_multi_avg_fn");
    NoGradGuard no_grad;
    const int64_t n = num_averaged.item<int64_t>();
    for (size_t i = 0; i < averaged.size(); ++i) {
      Tensor& a = averaged[i];
      const Tensor& c = current[i];
      if (fusable(a, c)) {
        if (a.dtype() == kFloat32)
          swa_update(a.data_ptr<float>(), c.data_ptr<float>(), a.numel(), static_cast<float>(n + 1));
        else
          swa_update(a.data_ptr<double>(), c.data_ptr<double>(), a.numel(), static_cast<double>(n + 1));
      } else {
        // integer buffers (num_batches_tracked) average in floating point and truncate on the copy back
        a.copy_(a + (c - a) / (num_averaged.to(a.device()) + 1));
      }
    }
  };
}

// -------------------------------------------------------------------------------------------------
// AveragedModel

AveragedModel::AveragedModel(nn::ModulePtr model, std::optional<Device> device, AvgFn avg_fn_,
                             MultiAvgFn multi_avg_fn_, bool use_buffers_)
    : avg_fn(std::move(avg_fn_)), multi_avg_fn(std::move(multi_avg_fn_)), use_buffers(use_buffers_) {
  if (!model) throw std::invalid_argument("[AveragedModel] model is null");
  if (avg_fn && multi_avg_fn) throw std::invalid_argument("Only one of avg_fn and multi_avg_fn should be provided");
  module_ = register_module("module", model->clone(device));
  n_averaged = register_buffer("n_averaged", zeros({}, TensorOptions().dtype(kInt64).device(device ? *device : Device(kCPU))));
}

Tensor AveragedModel::forward(const Tensor& input) { return (*module_)(input); }

nn::Value AveragedModel::forward_args(const nn::Args& args, const nn::Kwargs& kwargs) {
  return module_->call(args, kwargs);
}

void AveragedModel::update_parameters(const nn::Module& model) {
  NoGradGuard no_grad;
  auto with_buffers = [](const nn::Module& m) {
    std::vector<Tensor> v = m.parameters();
    for (auto& b : m.buffers()) v.push_back(b);
    return v;
  };
  const std::vector<Tensor> mine = use_buffers ? with_buffers(*module_) : parameters();
  const std::vector<Tensor> theirs = use_buffers ? with_buffers(model) : model.parameters();
  const size_t count = std::min(mine.size(), theirs.size());  // zip(), as PyTorch
  const bool copy = n_averaged.item<int64_t>() == 0;

  std::vector<Tensor> averaged, current;
  averaged.reserve(count);
  current.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    Tensor a = mine[i].detach();
    Tensor c = theirs[i].detach().to(a.device());
    if (copy) a.copy_(c);
    averaged.push_back(std::move(a));
    current.push_back(std::move(c));
  }

  if (!copy) {
    if (multi_avg_fn || !avg_fn) {
      // one call per (device, dtype) of the averaged tensors, in order of first appearance
      static const MultiAvgFn default_fn = get_swa_multi_avg_fn();
      const MultiAvgFn& fn = multi_avg_fn ? multi_avg_fn : default_fn;
      struct Group {
        Device device;
        ScalarType dtype;
        std::vector<Tensor> averaged, current;
      };
      std::vector<Group> groups;
      for (size_t i = 0; i < count; ++i) {
        const Tensor& a = averaged[i];
        auto it = std::find_if(groups.begin(), groups.end(),
                               [&](const Group& g) { return g.device == a.device() && g.dtype == a.dtype(); });
        if (it == groups.end()) it = groups.insert(groups.end(), Group{a.device(), a.dtype(), {}, {}});
        it->averaged.push_back(a);
        it->current.push_back(current[i]);
      }
      for (auto& g : groups) fn(g.averaged, g.current, n_averaged.to(g.device));
    } else {
      for (size_t i = 0; i < count; ++i) {
        Tensor& a = averaged[i];
        a.copy_(avg_fn(a, current[i], n_averaged.to(a.device())));
      }
    }
  }

  if (!use_buffers) {
    // buffers are not averaged: keep them in sync with the model
    const std::vector<Tensor> bufs = module_->buffers(), model_bufs = model.buffers();
    for (size_t i = 0; i < std::min(bufs.size(), model_bufs.size()); ++i) {
      Tensor b = bufs[i].detach();
      b.copy_(model_bufs[i].detach().to(b.device()));
    }
  }
  n_averaged.add_(1);
}

// -------------------------------------------------------------------------------------------------
// update_bn

namespace detail {

UpdateBnScope::UpdateBnScope(nn::Module& model) : model_(model) {
  for (const auto& m : model.modules()) {
    auto* bn = m->as<nn::BatchNormBase>();
    if (!bn) continue;
    bn->reset_running_stats();  // running_mean = 0, running_var = 1, num_batches_tracked = 0
    momenta_.emplace_back(bn, bn->options.momentum());
  }
  if (momenta_.empty()) return;
  was_training_ = model.is_training();
  model.train();
  for (auto& [bn, momentum] : momenta_) bn->options.momentum(std::nullopt);
}

UpdateBnScope::~UpdateBnScope() {
  if (momenta_.empty()) return;
  for (auto& [bn, momentum] : momenta_) bn->options.momentum(momentum);
  model_.train(was_training_);
}

}  // namespace detail

}  // namespace troupe::optim::swa_utils
