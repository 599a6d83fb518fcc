// Cloneable: gives a module clone(), a deep copy as copy.deepcopy(module) (libtorch's
// torch::nn::Cloneable).
//
// The copy is made by the module's copy constructor (options and plain members come along), its
// parameters, buffers and children are cleared and reset() registers fresh ones (with initialisation
// skipped and the default generator left as it was), so every member tensor and child points into
// the copy. Then the values, gradients, requires_grad flags, training flags and hooks of the original
// are copied in, recursively.
// Children that reset() does not make (those of containers, or added after construction) are cloned
// themselves; what the original shares (the same module or tensor twice) is shared in the copy.
#pragma once

#include <memory>
#include <optional>

#include <troupe/nn/module.h>
#include <troupe/tensor/autograd.h>
#include <troupe/tensor/random.h>

namespace troupe::nn {

/// Base of a cloneable module: `class Net : public nn::Cloneable<Net> { ... void reset() override; }`.
/// `Base` is the module class to derive from (Module, or an intermediate base such as BatchNormBase).
template <class Derived, class Base = Module>
class Cloneable : public Base {
 public:
  using Base::Base;

  /// Registers the module's parameters, buffers and submodules (called again on a copy by clone()).
  virtual void reset() = 0;

  /// A deep copy, with its tensors on `device` when given.
  ModulePtr clone(const std::optional<Device>& device = std::nullopt) const override {
    CloneMemo memo;
    return clone_with_memo(device, memo);
  }

 protected:
  ModulePtr clone_with_memo(const std::optional<Device>& device, CloneMemo& memo) const override {
    if (auto it = memo.modules.find(this); it != memo.modules.end()) return it->second;
    NoGradGuard no_grad;
    std::shared_ptr<Derived> copy;
    {
      // reset() on the copy initialises nothing (its values are overwritten below), and a draw it
      // makes anyway (a user's randn) is undone: clone() leaves the default generator as it was
      SkipInitGuard skip_init;
      Generator& gen = default_generator();
      const auto rng_state = gen.get_state();
      copy = std::make_shared<Derived>(static_cast<const Derived&>(*this));
      copy->parameters_.clear();
      copy->buffers_.clear();
      copy->non_persistent_buffers_.clear();
      copy->children_.clear();
      copy->reset();
      gen.set_state(rng_state);
    }
    memo.modules.emplace(this, copy);
    copy->copy_state_from_(*this, device, memo);
    return copy;
  }
};

}  // namespace troupe::nn
