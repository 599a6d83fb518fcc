// The tracing hook on the op path: one thread-local pointer that jit::trace sets. Traced ops (tensor
// ops and nn's functional forms) check it once; when it is set they run with tracing suspended (their
// inner ops are not recorded) and report themselves by aten name, arguments in schema order and outputs.
// Module calls report their scope (nn::Module::call). Eager code pays one thread-local load per op.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "ivalue.h"
#include "tensor.h"

namespace troupe::tracing {

/// What a tracer sees (implemented by jit's tracer). Not thread-safe: it belongs to the tracing thread.
class TracingState {
 public:
  virtual ~TracingState() = default;
  /// One op ran: `name` as aten spells it ("aten::linear"), `args` in the aten schema's order (an
  /// undefined Tensor or a default IValue is None), `outputs` its results.
  virtual void record_op(const char* name, const std::vector<IValue>& args, const std::vector<Tensor>& outputs) = 0;
  /// A module's forward begins; `module` is the nn::Module (opaque to this layer).
  virtual void enter_module(const void* module, const std::vector<Tensor>& inputs) = 0;
  /// The module's forward returned these tensors.
  virtual void exit_module(const void* module, const std::vector<Tensor>& outputs) = 0;
};

namespace detail {
inline thread_local TracingState* t_state = nullptr;
}

/// The calling thread's tracer, null when not tracing (the one check on the op path).
inline TracingState* state() noexcept { return detail::t_state; }

/// Sets the calling thread's tracer for its scope (jit::trace).
class StateGuard {
 public:
  explicit StateGuard(TracingState* s) noexcept : prev_(detail::t_state) { detail::t_state = s; }
  ~StateGuard() { detail::t_state = prev_; }
  StateGuard(const StateGuard&) = delete;
  StateGuard& operator=(const StateGuard&) = delete;

 private:
  TracingState* prev_;
};

/// A number as the IValue a schema's Scalar takes (int, float or bool).
inline IValue scalar(const Scalar& s) {
  if (s.is_boolean()) return IValue(s.to_long() != 0);
  if (s.is_integral()) return IValue(s.to_long());
  return IValue(s.to_double());
}
/// A 2-D op's int[2] argument: one number stands for both dims.
inline std::vector<int64_t> pair(IntArrayRef v) {
  if (v.size() == 1) return {v[0], v[0]};
  return v.vec();
}
/// PyTorch's ScalarType code of a dtype (c10::ScalarType's numbering: Byte 0, Int 3, Long 4, Half 5,
/// Float 6, Double 7, Bool 11, BFloat16 15).
inline int64_t scalar_type_code(ScalarType t) {
  constexpr int64_t codes[] = {11, 0, 3, 4, 5, 15, 6, 7};
  return codes[static_cast<int>(t)];
}
/// An optional dtype argument: its ScalarType code or None.
inline IValue dtype(std::optional<ScalarType> t) { return t ? IValue(scalar_type_code(*t)) : IValue(); }

/// Runs `f` with tracing suspended and records it as one op `name(args) -> f()`.
template <class F>
auto record(TracingState* st, const char* name, std::vector<IValue> args, F&& f) {
  decltype(f()) out;
  {
    StateGuard suspend(nullptr);
    out = f();
  }
  if constexpr (std::is_same_v<decltype(out), Tensor>) {
    st->record_op(name, args, {out});
  } else {
    st->record_op(name, args, {std::get<0>(out), std::get<1>(out)});
  }
  return out;
}

}  // namespace troupe::tracing

/// At the top of a traced op: when tracing, record `call` (the op itself, re-entered with tracing off)
/// as `name` with the given arguments and return its result.
#define TROUPE_TRACE_OP(name, call, ...)                                             \
  if (auto* troupe_tracer_ = ::troupe::tracing::state(); troupe_tracer_ != nullptr) \
  return ::troupe::tracing::record(troupe_tracer_, name, {__VA_ARGS__}, [&] { return call; })
