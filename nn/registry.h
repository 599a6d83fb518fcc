// The function registry: apply functions and hooks registered by name, so that a call on a subtree
// hosted by another rank can name the function instead of shipping a closure (every rank runs the
// same binary, so the same names exist everywhere).
//
//   TROUPE_REGISTER_APPLY_FN(init_weights, [](nn::Module& m) { ... });
//   model->apply("init_weights");            // works locally and, later, on remote subtrees
#pragma once

#include <string>
#include <vector>

#include <troupe/nn/module.h>

namespace troupe::nn::registry {

/// Registers `fn` under `name`; throws if the name is taken by another function of the same kind.
void add_apply_fn(const std::string& name, ApplyFn fn);
void add_forward_pre_hook(const std::string& name, ForwardPreHook fn);
void add_forward_hook(const std::string& name, ForwardHook fn);
void add_backward_pre_hook(const std::string& name, BackwardPreHook fn);
void add_backward_hook(const std::string& name, BackwardHook fn);
void add_state_dict_pre_hook(const std::string& name, StateDictPreHook fn);
void add_load_state_dict_post_hook(const std::string& name, LoadStateDictPostHook fn);

/// Whether a function of the kind ("apply", "forward_pre_hook", "forward_hook", "backward_pre_hook",
/// "backward_hook", "state_dict_pre_hook", "load_state_dict_post_hook") is registered as `name`.
bool contains(const std::string& kind, const std::string& name);
/// The registered names of a kind, sorted.
std::vector<std::string> names(const std::string& kind);
/// Removes a registration (tests); returns whether it existed.
bool remove(const std::string& kind, const std::string& name);

/// Static registration helper behind the TROUPE_REGISTER_* macros.
struct Registrar {
  template <class F>
  Registrar(void (*add)(const std::string&, F), const char* name, F fn) {
    add(name, std::move(fn));
  }
};

}  // namespace troupe::nn::registry

#define TROUPE_REGISTRY_CONCAT2(a, b) a##b
#define TROUPE_REGISTRY_CONCAT(a, b) TROUPE_REGISTRY_CONCAT2(a, b)
/// Registers an apply function `name` (an identifier) at static-initialisation time.
#define TROUPE_REGISTER_APPLY_FN(name, ...)                                                            \
  static ::troupe::nn::registry::Registrar TROUPE_REGISTRY_CONCAT(troupe_reg_apply_, name)(           \
      &::troupe::nn::registry::add_apply_fn, #name, ::troupe::nn::ApplyFn(__VA_ARGS__))
#define TROUPE_REGISTER_FORWARD_PRE_HOOK(name, ...)                                                    \
  static ::troupe::nn::registry::Registrar TROUPE_REGISTRY_CONCAT(troupe_reg_fpre_, name)(            \
      &::troupe::nn::registry::add_forward_pre_hook, #name, ::troupe::nn::ForwardPreHook(__VA_ARGS__))
#define TROUPE_REGISTER_FORWARD_HOOK(name, ...)                                                        \
  static ::troupe::nn::registry::Registrar TROUPE_REGISTRY_CONCAT(troupe_reg_fwd_, name)(             \
      &::troupe::nn::registry::add_forward_hook, #name, ::troupe::nn::ForwardHook(__VA_ARGS__))
#define TROUPE_REGISTER_BACKWARD_PRE_HOOK(name, ...)                                                   \
  static ::troupe::nn::registry::Registrar TROUPE_REGISTRY_CONCAT(troupe_reg_bpre_, name)(            \
      &::troupe::nn::registry::add_backward_pre_hook, #name, ::troupe::nn::BackwardPreHook(__VA_ARGS__))
#define TROUPE_REGISTER_BACKWARD_HOOK(name, ...)                                                       \
  static ::troupe::nn::registry::Registrar TROUPE_REGISTRY_CONCAT(troupe_reg_bwd_, name)(             \
      &::troupe::nn::registry::add_backward_hook, #name, ::troupe::nn::BackwardHook(__VA_ARGS__))
