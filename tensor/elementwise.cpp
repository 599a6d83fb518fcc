// Elementwise ops: NumPy broadcasting, PyTorch type promotion, and each op's backward beside its forward.
// (About 800 lines, kept whole: every op here, the in-place forms at the bottom included, goes through the
// promotion, broadcasting and casting helpers at the top; a cut would only move those into a header.)
#include <cmath>
#include "tracing.h"
#include <sstream>
#include <stdexcept>

#include "autograd.h"
#include "backend.h"
#include "ops.h"

namespace troupe {

using autograd::SavedVariable;
using autograd::variable_list;

// ---------------------------------------------------------------- type promotion

namespace {

// PyTorch's ResultTypeState: dimensioned tensors, zero-dim tensors and wrapped numbers promote
// separately; a lower priority only wins when it is of a higher category.
struct ResultState {
  std::optional<ScalarType> dim, zero, wrapped;
  static void upd(std::optional<ScalarType>& r, ScalarType t) { r = r ? promote_types(*r, t) : t; }
  void add(const Tensor& t) { upd(t.dim() > 0 ? dim : zero, t.dtype()); }
  void add(Scalar s) {
    ScalarType t = s.is_floating_point() ? get_default_dtype() : (s.is_boolean() ? kBool : kInt64);
    upd(wrapped, t);
  }
  static std::optional<ScalarType> combine(std::optional<ScalarType> higher, std::optional<ScalarType> lower) {
    if (!higher) return lower;
    if (!lower) return higher;
    if (is_floating_point(*higher)) return higher;
    if (*higher == kBool || is_floating_point(*lower)) return promote_types(*higher, *lower);
    return higher;
  }
  ScalarType result() const { return *combine(dim, combine(zero, wrapped)); }
};


// A view of t with stride 0 on broadcast dims, no autograd (kernels only).
Tensor expand_raw(const Tensor& t, const std::vector<int64_t>& sizes) {
  if (t.sizes().equals(sizes)) return t;
  NoGradGuard ng;
  return t.detach().expand(sizes);
}

Tensor cast_raw(const Tensor& t, ScalarType dt) {
  if (t.dtype() == dt) return t;
  NoGradGuard ng;
  return t.detach().to(dt);
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  if (a.device() != b.device())
    throw std::invalid_argument(std::string("[") + op +
                                "] Expected all tensors to be on the same device, but found at least two devices, " +
                                a.device().str() + " and " + b.device().str() + "!");
}

bool is_comparison(BinaryOp op) {
  return op == BinaryOp::Eq || op == BinaryOp::Ne || op == BinaryOp::Lt || op == BinaryOp::Le || op == BinaryOp::Gt ||
         op == BinaryOp::Ge || op == BinaryOp::LogicalAnd || op == BinaryOp::LogicalOr;
}

// A 0-dim CPU tensor beside a tensor on another device is used as a number, as in PyTorch
// (`cuda_tensor * torch.tensor(2.)` works): this is that number on `d`, outside the graph.
bool is_cpu_scalar(const Tensor& t) { return t.dim() == 0 && t.device().is_cpu(); }
Tensor scalar_to_device_raw(const Tensor& t, Device d) {
  NoGradGuard ng;
  return t.detach().to(d);
}

// Forward of a binary op on tensors: promotion, broadcasting, kernel. No autograd.
Tensor binary_forward(const char* name, BinaryOp op, const Tensor& a, const Tensor& b, ScalarType compute,
                      double alpha = 1) {
  if (a.device() != b.device()) {
    if (is_cpu_scalar(b)) return binary_forward(name, op, a, scalar_to_device_raw(b, a.device()), compute, alpha);
    if (is_cpu_scalar(a)) return binary_forward(name, op, scalar_to_device_raw(a, b.device()), b, compute, alpha);
  }
  check_same_device(name, a, b);
  auto shape = broadcast_shapes(a.sizes(), b.sizes(), name);
  ScalarType out_dt = is_comparison(op) ? kBool : compute;
  Tensor out = empty(shape, TensorOptions().dtype(out_dt).device(a.device()));
  backend(a).binary(op, out, expand_raw(cast_raw(a, compute), shape), expand_raw(cast_raw(b, compute), shape), alpha);
  return out;
}

// A 0-dim tensor holding s, in dtype dt.
Tensor wrap_scalar(Scalar s, ScalarType dt, Device d) { return full({}, s, TensorOptions().dtype(dt).device(d)); }

ScalarType float_result(ScalarType t) { return is_floating_point(t) ? t : get_default_dtype(); }

}  // namespace

ScalarType result_type(const Tensor& a, const Tensor& b) {
  ResultState s;
  s.add(a);
  s.add(b);
  return s.result();
}

ScalarType result_type(const Tensor& a, Scalar b) {
  ResultState s;
  s.add(a);
  s.add(b);
  return s.result();
}

namespace {

// A binary op against a number: the number becomes a 0-dim tensor of the promoted dtype.
std::pair<Tensor, ScalarType> scalar_operand(const Tensor& a, Scalar b) {
  ScalarType dt = result_type(a, b);
  return {wrap_scalar(b, dt, a.device()), dt};
}

// In-place ops: the promoted result must be castable to self's dtype.
void check_inplace_cast(const char* op, ScalarType result, ScalarType self) {
  bool ok = !(is_floating_point(result) && !is_floating_point(self)) && !(result != kBool && self == kBool);
  if (!ok)
    throw std::invalid_argument(std::string("[") + op + "] result type " + dtype_name(result) +
                                " can't be cast to the desired output type " + dtype_name(self));
}

}  // namespace

// ---------------------------------------------------------------- add / sub

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) {
  TROUPE_TRACE_OP("aten::add", add(a, b, alpha), a, b, tracing::scalar(alpha));
  ScalarType dt = result_type(a, b);
  Tensor out = binary_forward("add", BinaryOp::Add, a, b, dt, alpha.to_double());
  if (autograd::any_requires_grad({&a, &b})) {
    auto as = a.sizes().vec(), bs = b.sizes().vec();
    double al = alpha.to_double();
    bool ra = a.requires_grad(), rb = b.requires_grad();
    autograd::record("AddBackward0", {a, b}, out, [as, bs, al, ra, rb](const variable_list& g) {
      return variable_list{ra ? sum_to(g[0], as) : Tensor(), rb ? sum_to(al == 1 ? g[0] : g[0] * al, bs) : Tensor()};
    }, false);
  }
  return out;
}

Tensor add(const Tensor& a, Scalar b, Scalar alpha) {
  TROUPE_TRACE_OP("aten::add", add(a, b, alpha), a, tracing::scalar(b), tracing::scalar(alpha));
  auto [bt, dt] = scalar_operand(a, b);
  Tensor out = binary_forward("add", BinaryOp::Add, a, bt, dt, alpha.to_double());
  if (autograd::any_requires_grad({&a}))
    autograd::record("AddBackward1", {a}, out, [](const variable_list& g) { return variable_list{g[0]}; }, false);
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  TROUPE_TRACE_OP("aten::sub", sub(a, b, alpha), a, b, tracing::scalar(alpha));
  if (a.dtype() == kBool && b.dtype() == kBool)
    throw std::invalid_argument("[sub] Subtraction, the `-` operator, with two bool tensors is not supported. Use the "
                                "`^` or `logical_xor()` operator instead.");
  ScalarType dt = result_type(a, b);
  Tensor out = binary_forward("sub", BinaryOp::Sub, a, b, dt, alpha.to_double());
  if (autograd::any_requires_grad({&a, &b})) {
    auto as = a.sizes().vec(), bs = b.sizes().vec();
    double al = alpha.to_double();
    bool ra = a.requires_grad(), rb = b.requires_grad();
    autograd::record("SubBackward0", {a, b}, out, [as, bs, al, ra, rb](const variable_list& g) {
      return variable_list{ra ? sum_to(g[0], as) : Tensor(), rb ? sum_to(g[0] * (-al), bs) : Tensor()};
    }, false);
  }
  return out;
}

Tensor sub(const Tensor& a, Scalar b, Scalar alpha) {
  TROUPE_TRACE_OP("aten::sub", sub(a, b, alpha), a, tracing::scalar(b), tracing::scalar(alpha));
  auto [bt, dt] = scalar_operand(a, b);
  Tensor out = binary_forward("sub", BinaryOp::Sub, a, bt, dt, alpha.to_double());
  if (autograd::any_requires_grad({&a}))
    autograd::record("SubBackward1", {a}, out, [](const variable_list& g) { return variable_list{g[0]}; }, false);
  return out;
}

Tensor rsub(const Tensor& a, Scalar b) {
  auto [bt, dt] = scalar_operand(a, b);
  Tensor out = binary_forward("rsub", BinaryOp::Sub, bt, a, dt);
  if (autograd::any_requires_grad({&a}))
    autograd::record("RsubBackward1", {a}, out, [](const variable_list& g) { return variable_list{-g[0]}; }, false);
  return out;
}

// ---------------------------------------------------------------- mul / div

Tensor mul(const Tensor& a, const Tensor& b) {
  TROUPE_TRACE_OP("aten::mul", mul(a, b), a, b);
  ScalarType dt = result_type(a, b);
  Tensor out = binary_forward("mul", BinaryOp::Mul, a, b, dt);
  if (autograd::any_requires_grad({&a, &b})) {
    bool ra = a.requires_grad(), rb = b.requires_grad();
    // each side's gradient needs the other side's value
    autograd::record("MulBackward0", {a, b}, out,
                     [sa = SavedVariable(rb ? a : Tensor(), false), sb = SavedVariable(ra ? b : Tensor(), false), ra,
                      rb, as = a.sizes().vec(), bs = b.sizes().vec()](const variable_list& g) {
                       return variable_list{ra ? sum_to(g[0] * sb.unpack(), as) : Tensor(),
                                            rb ? sum_to(g[0] * sa.unpack(), bs) : Tensor()};
                     });
  }
  return out;
}

Tensor mul(const Tensor& a, Scalar b) {
  TROUPE_TRACE_OP("aten::mul", mul(a, b), a, tracing::scalar(b));
  auto [bt, dt] = scalar_operand(a, b);
  Tensor out = binary_forward("mul", BinaryOp::Mul, a, bt, dt);
  if (autograd::any_requires_grad({&a}))
    autograd::record("MulBackward1", {a}, out, [b](const variable_list& g) { return variable_list{g[0] * b}; }, false);
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  TROUPE_TRACE_OP("aten::div", div(a, b), a, b);
  ScalarType dt = float_result(result_type(a, b));  // true division
  Tensor out = binary_forward("div", BinaryOp::Div, a, b, dt);
  if (autograd::any_requires_grad({&a, &b})) {
    bool ra = a.requires_grad(), rb = b.requires_grad();
    autograd::record("DivBackward0", {a, b}, out,
                     [sa = SavedVariable(rb ? a : Tensor(), false), sb = SavedVariable(b, false), ra, rb,
                      as = a.sizes().vec(), bs = b.sizes().vec()](const variable_list& g) {
                       Tensor bv = sb.unpack();
                       return variable_list{ra ? sum_to(g[0] / bv, as) : Tensor(),
                                            rb ? sum_to(-g[0] * sa.unpack() / (bv * bv), bs) : Tensor()};
                     });
  }
  return out;
}

Tensor div(const Tensor& a, Scalar b) {
  TROUPE_TRACE_OP("aten::div", div(a, b), a, tracing::scalar(b));
  auto [bt, dt0] = scalar_operand(a, b);
  ScalarType dt = float_result(dt0);
  Tensor out = binary_forward("div", BinaryOp::Div, a, bt, dt);
  if (autograd::any_requires_grad({&a}))
    autograd::record("DivBackward1", {a}, out, [b](const variable_list& g) { return variable_list{g[0] / b}; }, false);
  return out;
}

Tensor div(Scalar a, const Tensor& b) { return reciprocal(b) * a; }

// ---------------------------------------------------------------- pow

Tensor pow(const Tensor& a, const Tensor& e) {
  ScalarType dt = result_type(a, e);
  Tensor out = binary_forward("pow", BinaryOp::Pow, a, e, dt);
  if (autograd::any_requires_grad({&a, &e})) {
    bool ra = a.requires_grad(), re = e.requires_grad();
    autograd::record("PowBackward1", {a, e}, out,
                     [sa = SavedVariable(a, false), se = SavedVariable(e, false), so = SavedVariable(out, true), ra,
                      re, as = a.sizes().vec(), es = e.sizes().vec()](const variable_list& g) {
                       Tensor av = sa.unpack(), ev = se.unpack();
                       Tensor ga, gexp;
                       if (ra) ga = sum_to(g[0] * ev * pow(av, ev - 1), as);
                       if (re) {
                         // d/de a^e = a^e log a, taken as 0 where a == 0 and e >= 0
                         Tensor mask = logical_and(eq(av, 0.0), ge(ev, 0.0));
                         gexp = sum_to(masked_fill(g[0] * so.unpack() * log(av), mask, 0.0), es);
                       }
                       return variable_list{ga, gexp};
                     });
  }
  return out;
}

Tensor pow(const Tensor& a, Scalar e) {
  ScalarType dt = result_type(a, e);
  Tensor out = empty(a.sizes(), a.options().dtype(dt));
  if (is_integral(dt, true) && e.to_double() < 0)
    throw std::invalid_argument("[pow] Integers to negative integer powers are not allowed.");
  backend(a).unary(UnaryOp::PowScalar, out, cast_raw(a, dt), e.to_double(), 0);
  if (autograd::any_requires_grad({&a})) {
    double ev = e.to_double();
    autograd::record("PowBackward0", {a}, out, [sa = SavedVariable(a, false), ev](const variable_list& g) {
      if (ev == 0) return variable_list{zeros_like(g[0])};
      Tensor av = sa.unpack();
      return variable_list{g[0] * (ev == 2 ? av * 2.0 : pow(av, ev - 1) * ev)};
    });
  }
  return out;
}

Tensor pow(Scalar a, const Tensor& e) {
  ScalarType dt = result_type(e, a);
  Tensor out = empty(e.sizes(), e.options().dtype(dt));
  if (is_floating_point(dt)) {
    backend(e).unary(UnaryOp::RPowScalar, out, cast_raw(e, dt), a.to_double(), 0);
  } else {
    out = binary_forward("pow", BinaryOp::Pow, expand_raw(wrap_scalar(a, dt, e.device()), e.sizes().vec()), e, dt);
  }
  if (autograd::any_requires_grad({&e})) {
    double base = a.to_double();
    autograd::record("PowBackward2", {e}, out, [so = SavedVariable(out, true), base](const variable_list& g) {
      if (base == 0) return variable_list{zeros_like(g[0])};
      return variable_list{g[0] * so.unpack() * std::log(base)};
    });
  }
  return out;
}

// ---------------------------------------------------------------- unary math

namespace {

// out = op(x) in x's dtype, or the default float dtype for integer x when float_only.
Tensor unary_forward(UnaryOp op, const Tensor& x, bool float_only, double p0 = 0, double p1 = 0) {
  ScalarType dt = float_only ? float_result(x.dtype()) : x.dtype();
  if (!float_only && x.dtype() == kBool && op != UnaryOp::LogicalNot)
    throw std::invalid_argument("[unary] this op is not supported for bool tensors");
  Tensor out = empty(x.sizes(), x.options().dtype(dt));
  backend(x).unary(op, out, cast_raw(x, dt), p0, p1);
  return out;
}

// Common shape of a unary op's recording: backward(g, saved x, saved out).
template <typename F>
Tensor unary_op(const char* name, UnaryOp op, const Tensor& x, bool float_only, bool save_x, bool save_out, F backward,
                double p0 = 0, double p1 = 0) {
  Tensor out = unary_forward(op, x, float_only, p0, p1);
  if (autograd::any_requires_grad({&x})) {
    autograd::record(name, {x}, out,
                     [sx = SavedVariable(save_x ? x : Tensor(), false), so = SavedVariable(save_out ? out : Tensor(), true),
                      backward](const variable_list& g) {
                       return variable_list{backward(g[0], sx.unpack(), so.unpack())};
                     },
                     save_x || save_out);
  }
  return out;
}

}  // namespace

Tensor neg(const Tensor& x) {
  if (x.dtype() == kBool)
    throw std::invalid_argument("[neg] Negation, the `-` operator, on a bool tensor is not supported. If you are "
                                "trying to invert a mask, use the `~` or `logical_not()` operator instead.");
  return unary_op("NegBackward0", UnaryOp::Neg, x, false, false, false,
                  [](const Tensor& g, const Tensor&, const Tensor&) { return -g; });
}

Tensor abs(const Tensor& x) {
  return unary_op("AbsBackward0", UnaryOp::Abs, x, false, true, false,
                  [](const Tensor& g, const Tensor& x, const Tensor&) { return g * sign(x); });
}

Tensor exp(const Tensor& x) {
  TROUPE_TRACE_OP("aten::exp", exp(x), x);
  return unary_op("ExpBackward0", UnaryOp::Exp, x, true, false, true,
                  [](const Tensor& g, const Tensor&, const Tensor& y) { return g * y; });
}

Tensor log(const Tensor& x) {
  TROUPE_TRACE_OP("aten::log", log(x), x);
  return unary_op("LogBackward0", UnaryOp::Log, x, true, true, false,
                  [](const Tensor& g, const Tensor& x, const Tensor&) { return g / x; });
}

Tensor log1p(const Tensor& x) {
  return unary_op("Log1PBackward0", UnaryOp::Log1p, x, true, true, false,
                  [](const Tensor& g, const Tensor& x, const Tensor&) { return g / (x + 1.0); });
}

Tensor sqrt(const Tensor& x) {
  return unary_op("SqrtBackward0", UnaryOp::Sqrt, x, true, false, true,
                  [](const Tensor& g, const Tensor&, const Tensor& y) { return g / (y * 2.0); });
}

Tensor rsqrt(const Tensor& x) {
  return unary_op("RsqrtBackward0", UnaryOp::Rsqrt, x, true, false, true,
                  [](const Tensor& g, const Tensor&, const Tensor& y) { return g * pow(y, 3.0) * -0.5; });
}

Tensor sin(const Tensor& x) {
  return unary_op("SinBackward0", UnaryOp::Sin, x, true, true, false,
                  [](const Tensor& g, const Tensor& x, const Tensor&) { return g * cos(x); });
}

Tensor cos(const Tensor& x) {
  return unary_op("CosBackward0", UnaryOp::Cos, x, true, true, false,
                  [](const Tensor& g, const Tensor& x, const Tensor&) { return -(g * sin(x)); });
}

Tensor tanh(const Tensor& x) {
  TROUPE_TRACE_OP("aten::tanh", tanh(x), x);
  return unary_op("TanhBackward0", UnaryOp::Tanh, x, true, false, true, [](const Tensor& g, const Tensor&, const Tensor& y) {
    if (!autograd::GradMode::is_enabled()) {
      Tensor out = empty(g.sizes(), g.options());
      backend(g).binary(BinaryOp::TanhGrad, out, g, y.to(g.dtype()), 1);
      return out;
    }
    return g * (1.0 - y * y);
  });
}

Tensor sigmoid(const Tensor& x) {
  TROUPE_TRACE_OP("aten::sigmoid", sigmoid(x), x);
  return unary_op("SigmoidBackward0", UnaryOp::Sigmoid, x, true, false, true,
                  [](const Tensor& g, const Tensor&, const Tensor& y) {
                    if (!autograd::GradMode::is_enabled()) {
                      Tensor out = empty(g.sizes(), g.options());
                      backend(g).binary(BinaryOp::SigmoidGrad, out, g, y.to(g.dtype()), 1);
                      return out;
                    }
                    return g * y * (1.0 - y);
                  });
}

Tensor relu(const Tensor& x) {
  TROUPE_TRACE_OP("aten::relu", relu(x), x);
  return unary_op("ReluBackward0", UnaryOp::Relu, x, false, false, true,
                  [](const Tensor& g, const Tensor&, const Tensor& y) {
                    if (!autograd::GradMode::is_enabled() && g.sizes().equals(y.sizes())) {
                      Tensor out = empty(g.sizes(), g.options());
                      backend(g).binary(BinaryOp::ReluGrad, out, g, y.to(g.dtype()), 1);
                      return out;
                    }
                    return g * gt(y, 0.0).to(g.dtype());
                  });
}

Tensor erf(const Tensor& x) {
  return unary_op("ErfBackward0", UnaryOp::Erf, x, true, true, false, [](const Tensor& g, const Tensor& x, const Tensor&) {
    return g * exp(-(x * x)) * (2.0 / std::sqrt(M_PI));
  });
}

Tensor gelu(const Tensor& x, const std::string& approximate) {
  TROUPE_TRACE_OP("aten::gelu", gelu(x, approximate), x, approximate);
  if (approximate != "none" && approximate != "tanh")
    throw std::invalid_argument("[gelu] approximate argument must be either none or tanh, got '" + approximate + "'");
  bool t = approximate == "tanh";
  return unary_op("GeluBackward0", t ? UnaryOp::GeluTanh : UnaryOp::Gelu, x, true, true, false,
                  [t](const Tensor& g, const Tensor& x, const Tensor&) {
                    if (!autograd::GradMode::is_enabled()) {
                      Tensor d = empty(x.sizes(), x.options());
                      backend(x).unary(t ? UnaryOp::GeluTanhGrad : UnaryOp::GeluGrad, d, x, 0, 0);
                      return g * d;
                    }
                    if (!t) {  // differentiable form for double backward
                      Tensor cdf = (erf(x * M_SQRT1_2) + 1.0) * 0.5;
                      Tensor pdf = exp(x * x * -0.5) * (1.0 / std::sqrt(2 * M_PI));
                      return g * (cdf + x * pdf);
                    }
                    const double k = std::sqrt(2.0 / M_PI);
                    Tensor inner = (x + pow(x, 3.0) * 0.044715) * k;
                    Tensor th = tanh(inner);
                    Tensor d = (th + 1.0) * 0.5 + x * 0.5 * (1.0 - th * th) * ((x * x * (3 * 0.044715) + 1.0) * k);
                    return g * d;
                  });
}

Tensor silu(const Tensor& x) {
  return unary_op("SiluBackward0", UnaryOp::Silu, x, true, true, false, [](const Tensor& g, const Tensor& x, const Tensor&) {
    if (!autograd::GradMode::is_enabled()) {
      Tensor d = empty(x.sizes(), x.options());
      backend(x).unary(UnaryOp::SiluGrad, d, x, 0, 0);
      return g * d;
    }
    Tensor s = sigmoid(x);
    return g * s * (x * (1.0 - s) + 1.0);
  });
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  return unary_op("SoftplusBackward0", UnaryOp::Softplus, x, true, true, false,
                  [beta, threshold](const Tensor& g, const Tensor& x, const Tensor&) {
                    if (!autograd::GradMode::is_enabled()) {
                      Tensor d = empty(x.sizes(), x.options());
                      backend(x).unary(UnaryOp::SoftplusGrad, d, x, beta, threshold);
                      return g * d;
                    }
                    Tensor s = sigmoid(x * beta);
                    return g * where(gt(x * beta, threshold), ones_like(s), s);
                  },
                  beta, threshold);
}

Tensor leaky_relu(const Tensor& x, double slope) {
  TROUPE_TRACE_OP("aten::leaky_relu", leaky_relu(x, slope), x, slope);
  return unary_op("LeakyReluBackward0", UnaryOp::LeakyRelu, x, true, true, false,
                  [slope](const Tensor& g, const Tensor& x, const Tensor&) {
                    return g * where(gt(x, 0.0), ones_like(x), full_like(x, slope));
                  },
                  slope);
}

Tensor elu(const Tensor& x, double alpha) {
  return unary_op("EluBackward0", UnaryOp::Elu, x, true, true, true,
                  [alpha](const Tensor& g, const Tensor& x, const Tensor& y) {
                    return where(gt(x, 0.0), g, g * (y + alpha));
                  },
                  alpha);
}

Tensor sign(const Tensor& x) {
  if (x.dtype() == kBool) return x.clone();
  return unary_op("SignBackward0", UnaryOp::Sign, x, false, false, false,
                  [](const Tensor& g, const Tensor&, const Tensor&) { return zeros_like(g); });
}

Tensor reciprocal(const Tensor& x) {
  return unary_op("ReciprocalBackward0", UnaryOp::Reciprocal, x, true, false, true,
                  [](const Tensor& g, const Tensor&, const Tensor& y) { return -(g * y * y); });
}

Tensor square(const Tensor& x) {
  if (x.dtype() == kBool) return pow(x.to(kInt64), 2);
  return unary_op("PowBackward0", UnaryOp::Square, x, false, true, false,
                  [](const Tensor& g, const Tensor& x, const Tensor&) { return g * x * 2.0; });
}

// ---------------------------------------------------------------- maximum, minimum, clamp

Tensor maximum(const Tensor& a, const Tensor& b) {
  ScalarType dt = result_type(a, b);
  Tensor out = binary_forward("maximum", BinaryOp::Maximum, a, b, dt);
  if (autograd::any_requires_grad({&a, &b})) {
    autograd::record("MaximumBackward0", {a, b}, out,
                     [sa = SavedVariable(a, false), sb = SavedVariable(b, false), as = a.sizes().vec(),
                      bs = b.sizes().vec()](const variable_list& g) {
                       Tensor av = sa.unpack(), bv = sb.unpack();
                       Tensor half = where(eq(av, bv), g[0] * 0.5, g[0]);
                       return variable_list{sum_to(masked_fill(half, lt(av, bv), 0.0), as),
                                            sum_to(masked_fill(half, gt(av, bv), 0.0), bs)};
                     });
  }
  return out;
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  ScalarType dt = result_type(a, b);
  Tensor out = binary_forward("minimum", BinaryOp::Minimum, a, b, dt);
  if (autograd::any_requires_grad({&a, &b})) {
    autograd::record("MinimumBackward0", {a, b}, out,
                     [sa = SavedVariable(a, false), sb = SavedVariable(b, false), as = a.sizes().vec(),
                      bs = b.sizes().vec()](const variable_list& g) {
                       Tensor av = sa.unpack(), bv = sb.unpack();
                       Tensor half = where(eq(av, bv), g[0] * 0.5, g[0]);
                       return variable_list{sum_to(masked_fill(half, gt(av, bv), 0.0), as),
                                            sum_to(masked_fill(half, lt(av, bv), 0.0), bs)};
                     });
  }
  return out;
}

Tensor clamp(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  if (!lo && !hi) throw std::invalid_argument("[clamp] At least one of 'min' or 'max' must not be None");
  ScalarType dt = x.dtype();
  if (lo) dt = result_type(x, *lo);
  if (hi) dt = promote_types(dt, result_type(x, *hi));
  Tensor out;
  {
    NoGradGuard ng;
    Tensor xd = cast_raw(x, dt);
    out = xd;
    if (lo) out = binary_forward("clamp", BinaryOp::Maximum, out, wrap_scalar(*lo, dt, x.device()), dt);
    if (hi) out = binary_forward("clamp", BinaryOp::Minimum, out, wrap_scalar(*hi, dt, x.device()), dt);
    if (out.is_same(xd)) out = xd.clone();
  }
  if (autograd::any_requires_grad({&x})) {
    autograd::record("ClampBackward1", {x}, out, [sx = SavedVariable(x, false), lo, hi](const variable_list& g) {
      Tensor xv = sx.unpack();
      Tensor keep = ones_like(xv, TensorOptions().dtype(kBool));
      if (lo) keep = logical_and(keep, ge(xv, *lo));
      if (hi) keep = logical_and(keep, le(xv, *hi));
      return variable_list{g[0] * keep.to(g[0].dtype())};
    });
  }
  return out;
}

Tensor clamp_min(const Tensor& x, Scalar lo) { return clamp(x, lo, std::nullopt); }
Tensor clamp_max(const Tensor& x, Scalar hi) { return clamp(x, std::nullopt, hi); }

// ---------------------------------------------------------------- comparisons and logic (no gradient)

#define TROUPE_COMPARISON(fname, OP)                                                                 \
  Tensor fname(const Tensor& a, const Tensor& b) {                                                   \
    return binary_forward(#fname, BinaryOp::OP, a, b, result_type(a, b));                             \
  }                                                                                                  \
  Tensor fname(const Tensor& a, Scalar b) {                                                          \
    auto [bt, dt] = scalar_operand(a, b);                                                            \
    return binary_forward(#fname, BinaryOp::OP, a, bt, dt);                                          \
  }
TROUPE_COMPARISON(eq, Eq)
TROUPE_COMPARISON(ne, Ne)
TROUPE_COMPARISON(lt, Lt)
TROUPE_COMPARISON(le, Le)
TROUPE_COMPARISON(gt, Gt)
TROUPE_COMPARISON(ge, Ge)
#undef TROUPE_COMPARISON

Tensor logical_not(const Tensor& x) {
  Tensor out = empty(x.sizes(), x.options().dtype(kBool));
  backend(x).unary(UnaryOp::LogicalNot, out, x, 0, 0);
  return out;
}

Tensor logical_and(const Tensor& a, const Tensor& b) {
  return binary_forward("logical_and", BinaryOp::LogicalAnd, a, b, result_type(a, b));
}

Tensor logical_or(const Tensor& a, const Tensor& b) {
  return binary_forward("logical_or", BinaryOp::LogicalOr, a, b, result_type(a, b));
}

Tensor isnan(const Tensor& x) {
  Tensor out = empty(x.sizes(), x.options().dtype(kBool));
  backend(x).unary(UnaryOp::IsNan, out, x, 0, 0);
  return out;
}

Tensor isinf(const Tensor& x) {
  Tensor out = empty(x.sizes(), x.options().dtype(kBool));
  backend(x).unary(UnaryOp::IsInf, out, x, 0, 0);
  return out;
}

Tensor isfinite(const Tensor& x) {
  Tensor out = empty(x.sizes(), x.options().dtype(kBool));
  backend(x).unary(UnaryOp::IsFinite, out, x, 0, 0);
  return out;
}

// ---------------------------------------------------------------- where, masked_fill, lerp

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  if (cond.dtype() != kBool && cond.dtype() != kUInt8)
    throw std::invalid_argument(std::string("[where] expected condition to be a boolean tensor, but got a tensor with "
                                            "dtype ") + dtype_name(cond.dtype()));
  // 0-dim CPU values beside a condition on another device act as numbers (moved with autograd)
  if (!cond.device().is_cpu() && (is_cpu_scalar(a) || is_cpu_scalar(b)))
    return where(cond, is_cpu_scalar(a) ? a.to(cond.device()) : a, is_cpu_scalar(b) ? b.to(cond.device()) : b);
  check_same_device("where", a, b);
  check_same_device("where", cond, a);
  ScalarType dt = result_type(a, b);
  auto shape = broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
  Tensor out = empty(shape, a.options().dtype(dt));
  backend(a).where(out, expand_raw(cast_raw(cond, kBool), shape), expand_raw(cast_raw(a, dt), shape),
                   expand_raw(cast_raw(b, dt), shape));
  if (autograd::any_requires_grad({&a, &b})) {
    bool ra = a.requires_grad(), rb = b.requires_grad();
    autograd::record("WhereBackward0", {a, b}, out,
                     [sc = SavedVariable(cond, false), ra, rb, as = a.sizes().vec(), bs = b.sizes().vec()](
                         const variable_list& g) {
                       Tensor c = sc.unpack().to(kBool);
                       Tensor z = zeros({}, g[0].options());
                       return variable_list{ra ? sum_to(where(c, g[0], z), as) : Tensor(),
                                            rb ? sum_to(where(c, z, g[0]), bs) : Tensor()};
                     });
  }
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, Scalar b) {
  return where(cond, a, wrap_scalar(b, result_type(a, b), a.device()));
}

Tensor where(const Tensor& cond, Scalar a, const Tensor& b) {
  return where(cond, wrap_scalar(a, result_type(b, a), b.device()), b);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar v) {
  if (mask.dtype() != kBool)
    throw std::invalid_argument(std::string("[masked_fill] masked_fill_ only supports boolean masks, but got mask with "
                                            "dtype ") + dtype_name(mask.dtype()));
  auto shape = broadcast_shapes(x.sizes(), mask.sizes(), "masked_fill");
  if (!IntArrayRef(shape).equals(x.sizes()))
    throw std::invalid_argument("[masked_fill] mask of shape " + shape_str(mask.sizes()) +
                                " cannot be broadcast to the tensor's shape " + shape_str(x.sizes()));
  Tensor out = empty(x.sizes(), x.options());
  backend(x).where(out, expand_raw(mask, shape), expand_raw(wrap_scalar(v, x.dtype(), x.device()), shape), x);
  if (autograd::any_requires_grad({&x}))
    autograd::record("MaskedFillBackward0", {x}, out, [sm = SavedVariable(mask, false)](const variable_list& g) {
      return variable_list{masked_fill(g[0], sm.unpack(), 0.0)};
    });
  return out;
}

Tensor lerp(const Tensor& a, const Tensor& b, Scalar w) { return a + (b - a) * w; }

Tensor isclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  NoGradGuard ng;
  ScalarType dt = promote_types(result_type(a, b), kFloat64);
  Tensor x = a.to(dt), y = b.to(dt);
  Tensor close = le(abs(x - y), abs(y) * rtol + atol);
  close = logical_or(close, eq(x, y));  // equal infinities
  if (equal_nan) close = logical_or(close, logical_and(isnan(x), isnan(y)));
  return close;
}

namespace {
// Whether every element of the bool tensor c is true, read on the host (a CUDA c is copied over first).
bool all_true_on_host(Tensor c) {
  if (!c.is_cpu()) c = c.cpu();
  c = c.contiguous();
  const bool* p = c.data_ptr<bool>();
  for (int64_t i = 0; i < c.numel(); ++i)
    if (!p[i]) return false;
  return true;
}
}  // namespace

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  return all_true_on_host(isclose(a, b, rtol, atol, equal_nan));
}

bool equal(const Tensor& a, const Tensor& b) {
  if (!a.sizes().equals(b.sizes())) return false;
  NoGradGuard ng;
  return all_true_on_host(eq(a, b));
}

// ---------------------------------------------------------------- in-place forms

namespace {

// self = f(self, other) for a binary op, with autograd through record_inplace.
Tensor& binary_inplace(const char* name, const char* node, BinaryOp op, Tensor& self, const Tensor& other, double alpha) {
  autograd::check_inplace(self, name);
  ScalarType dt = result_type(self, other);
  if (op == BinaryOp::Div) dt = float_result(dt);
  check_inplace_cast(name, dt, self.dtype());
  auto shape = broadcast_shapes(self.sizes(), other.sizes(), name);
  if (!IntArrayRef(shape).equals(self.sizes()))
    throw std::invalid_argument(std::string("[") + name + "] output with shape " + list_str(self.sizes()) +
                                " doesn't match the broadcast shape " + list_str(shape));
  if (self.device() != other.device() && is_cpu_scalar(other)) {
    // a 0-dim CPU tensor acts as a number on self's device; its gradient (if any) comes back to the
    // CPU through the engine's device check, as in PyTorch
    Tensor moved = other.to(self.device());
    return binary_inplace(name, node, op, self, moved, alpha);
  }
  check_same_device(name, self, other);
  // mul_/div_ need the old value of self for the gradient of other
  bool need_old = other.requires_grad() && (op == BinaryOp::Mul || op == BinaryOp::Div);
  Tensor old = need_old ? self.detach().clone() : Tensor();
  Tensor o = expand_raw(cast_raw(other, dt), shape);
  if (dt == self.dtype()) {
    Tensor sd = self.detach();
    if (o.impl()->storage == sd.impl()->storage && !o.is_same(sd)) o = o.clone();
    backend(self).binary(op, sd, sd, o, alpha);
  } else {
    Tensor r = empty(shape, self.options().dtype(dt));
    backend(self).binary(op, r, cast_raw(self, dt), o, alpha);
    backend(self).copy(self, r);
  }
  self.bump_version();
  if (autograd::GradMode::is_enabled() && (self.requires_grad() || other.requires_grad() ||
                                            (self.is_view() && Tensor(self.impl()->view_base).requires_grad()))) {
    auto os = other.sizes().vec();
    bool ro = other.requires_grad();
    SavedVariable so(op == BinaryOp::Mul || op == BinaryOp::Div ? other : Tensor(), false);
    SavedVariable sold(old, false);
    SavedVariable sres(op == BinaryOp::Div ? self : Tensor(), false);
    autograd::record_inplace(node, self, {other}, [op, alpha, os, ro, so, sold](const variable_list& g) {
      Tensor gs, go;
      switch (op) {
        case BinaryOp::Add:
          gs = g[0];
          if (ro) go = sum_to(alpha == 1 ? g[0] : g[0] * alpha, os);
          break;
        case BinaryOp::Sub:
          gs = g[0];
          if (ro) go = sum_to(g[0] * -alpha, os);
          break;
        case BinaryOp::Mul:
          gs = g[0] * so.unpack();
          if (ro) go = sum_to(g[0] * sold.unpack(), os);
          break;
        case BinaryOp::Div: {
          Tensor ov = so.unpack();
          gs = g[0] / ov;
          if (ro) go = sum_to(-g[0] * sold.unpack() / (ov * ov), os);
          break;
        }
        default: break;
      }
      return variable_list{gs, go};
    });
  }
  return self;
}

Tensor& unary_inplace(const char* name, Tensor& self, const std::function<Tensor(const Tensor&)>& f) {
  autograd::check_inplace(self, name);
  if (!autograd::GradMode::is_enabled() ||
      !(self.requires_grad() || (self.is_view() && Tensor(self.impl()->view_base).requires_grad()))) {
    NoGradGuard ng;
    Tensor r = f(self.detach());
    backend(self).copy(self, r);
    self.bump_version();
    return self;
  }
  // differentiate through the out-of-place op applied to a detached copy with its own small graph
  Tensor x = self.detach().clone().requires_grad_(true);
  Tensor y = f(x);
  {
    NoGradGuard ng;
    backend(self).copy(self, y);
  }
  self.bump_version();
  autograd::record_inplace(name, self, {}, [x, y](const variable_list& g) {
    return variable_list{autograd::grad({y}, {x}, {g[0]}, true, autograd::GradMode::is_enabled())[0]};
  });
  return self;
}

}  // namespace

Tensor& Tensor::add_(const Tensor& o, Scalar a) { return binary_inplace("add_", "AddBackward0", BinaryOp::Add, *this, o, a.to_double()); }
Tensor& Tensor::add_(Scalar o, Scalar a) {
  if (auto* tracer = tracing::state()) {
    {
      tracing::StateGuard suspend(nullptr);
      add_(o, a);
    }
    tracer->record_op("aten::add_", {*this, tracing::scalar(o), tracing::scalar(a)}, {*this});
    return *this;
  }
  check_inplace_cast("add_", result_type(*this, o), dtype());  // before the number is cast to self's dtype
  return binary_inplace("add_", "AddBackward1", BinaryOp::Add, *this, scalar_tensor(o, TensorOptions().dtype(dtype()).device(device())), a.to_double());
}
Tensor& Tensor::sub_(const Tensor& o, Scalar a) { return binary_inplace("sub_", "SubBackward0", BinaryOp::Sub, *this, o, a.to_double()); }
Tensor& Tensor::sub_(Scalar o, Scalar a) {
  check_inplace_cast("sub_", result_type(*this, o), dtype());
  return binary_inplace("sub_", "SubBackward1", BinaryOp::Sub, *this, scalar_tensor(o, TensorOptions().dtype(dtype()).device(device())), a.to_double());
}
Tensor& Tensor::mul_(const Tensor& o) { return binary_inplace("mul_", "MulBackward0", BinaryOp::Mul, *this, o, 1); }
Tensor& Tensor::mul_(Scalar o) {
  check_inplace_cast("mul_", result_type(*this, o), dtype());
  return binary_inplace("mul_", "MulBackward1", BinaryOp::Mul, *this, scalar_tensor(o, TensorOptions().dtype(dtype()).device(device())), 1);
}
Tensor& Tensor::div_(const Tensor& o) { return binary_inplace("div_", "DivBackward0", BinaryOp::Div, *this, o, 1); }
Tensor& Tensor::div_(Scalar o) {
  return binary_inplace("div_", "DivBackward1", BinaryOp::Div, *this,
                        scalar_tensor(o, TensorOptions().dtype(is_floating_point() ? dtype() : get_default_dtype()).device(device())), 1);
}
Tensor& Tensor::pow_(Scalar e) {
  return unary_inplace("pow_", *this, [e](const Tensor& x) { return troupe::pow(x, e); });
}
Tensor& Tensor::neg_() { return unary_inplace("neg_", *this, [](const Tensor& x) { return troupe::neg(x); }); }
Tensor& Tensor::exp_() { return unary_inplace("exp_", *this, [](const Tensor& x) { return troupe::exp(x); }); }
Tensor& Tensor::sqrt_() { return unary_inplace("sqrt_", *this, [](const Tensor& x) { return troupe::sqrt(x); }); }
Tensor& Tensor::relu_() { return unary_inplace("relu_", *this, [](const Tensor& x) { return troupe::relu(x); }); }
Tensor& Tensor::clamp_(std::optional<Scalar> lo, std::optional<Scalar> hi) {
  return unary_inplace("clamp_", *this, [lo, hi](const Tensor& x) { return troupe::clamp(x, lo, hi); });
}
Tensor& Tensor::masked_fill_(const Tensor& mask, Scalar v) {
  return unary_inplace("masked_fill_", *this, [&mask, v](const Tensor& x) { return troupe::masked_fill(x, mask, v); });
}

}  // namespace troupe
