// Finite-difference gradient checks: the numerical Jacobian by central differences in float64, compared with
// vector-Jacobian products from the autograd engine (unit vectors: the full Jacobian; or random projections).
#include "gradcheck.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops.h"

namespace troupe::autograd {

namespace {

std::vector<int64_t> unravel(int64_t flat, IntArrayRef sizes) {
  std::vector<int64_t> idx(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    int64_t s = sizes[d] > 0 ? sizes[d] : 1;
    idx[d] = flat % s;
    flat /= s;
  }
  return idx;
}

// Pointer to the element of (CPU, float64) x with row-major flat index `flat`.
double* element_ptr(const Tensor& x, int64_t flat) {
  auto idx = unravel(flat, x.sizes());
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * x.strides()[d];
  return static_cast<double*>(x.impl()->data()) + off;
}

std::string fmt(double v) {
  std::ostringstream os;
  os << std::setprecision(10) << v;
  return os.str();
}

std::vector<double> values_of(const Tensor& t) {
  NoGradGuard ng;
  return t.detach().to_vector<double>();
}

// The outputs gradcheck looks at: defined, floating, non-empty.
std::vector<size_t> checked_outputs(const variable_list& outs) {
  std::vector<size_t> r;
  for (size_t k = 0; k < outs.size(); ++k)
    if (outs[k].defined() && outs[k].is_floating_point() && outs[k].numel() > 0) r.push_back(k);
  return r;
}

// A tensor shaped like `like` (its dtype and device) from row-major values.
Tensor make_like(const std::vector<double>& v, const Tensor& like) {
  NoGradGuard ng;
  Tensor t = tensor(v, TensorOptions().dtype(kFloat64));
  return t.reshape(like.sizes()).to(like.device(), like.dtype()).contiguous();
}

void validate_inputs(const variable_list& inputs, const char* who) {
  bool any = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    any = true;
    std::string pre = std::string("[") + who + "] input " + std::to_string(i);
    if (x.dtype() != kFloat64)
      throw std::invalid_argument(pre + " requires grad but has dtype " + dtype_name(x.dtype()) +
                                  "; finite differences need float64 inputs");
    if (!x.is_cpu()) throw std::invalid_argument(pre + " is on " + x.device().str() + "; gradcheck runs on the CPU");
    for (int64_t d = 0; d < x.dim(); ++d)
      if (x.size(d) > 1 && x.stride(d) == 0)
        throw std::invalid_argument(pre + " has overlapping memory (stride 0 in dim " + std::to_string(d) +
                                    "); pass a contiguous copy");
  }
  if (!any) throw std::invalid_argument(std::string("[") + who + "] no input requires grad");
}

}  // namespace

bool gradcheck(const std::function<variable_list(const variable_list&)>& fn, const variable_list& inputs,
               GradcheckOptions opts) {
  validate_inputs(inputs, "gradcheck");
  std::vector<size_t> rg;  // inputs that require grad
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) rg.push_back(i);

  // ---- reference evaluation (its graph gives the analytical side)
  variable_list outs;
  {
    EnableGradGuard eg;
    outs = fn(inputs);
  }
  std::vector<size_t> outk = checked_outputs(outs);
  std::vector<int64_t> out_offset;  // start of each checked output in the concatenated output vector
  int64_t m = 0;
  for (size_t k : outk) {
    out_offset.push_back(m);
    m += outs[k].numel();
  }
  if (outk.empty())
    throw std::invalid_argument("[gradcheck] the function returned no non-empty floating-point output to check");

  auto eval_flat = [&]() {
    variable_list o;
    {
      EnableGradGuard eg;
      o = fn(inputs);
    }
    std::vector<double> flat;
    flat.reserve(static_cast<size_t>(m));
    for (size_t j = 0; j < outk.size(); ++j) {
      size_t k = outk[j];
      if (k >= o.size() || !o[k].defined() || !o[k].sizes().equals(outs[k].sizes()))
        throw std::runtime_error("[gradcheck] output " + std::to_string(k) +
                                 " changed shape or disappeared when an input was perturbed");
      auto v = values_of(o[k]);
      flat.insert(flat.end(), v.begin(), v.end());
    }
    return flat;
  };

  // ---- numerical Jacobian: num[r][e * m + j] = d out_j / d input_rg[r][e]
  std::vector<std::vector<double>> num(rg.size());
  for (size_t r = 0; r < rg.size(); ++r) {
    const Tensor& x = inputs[rg[r]];
    int64_t n = x.numel();
    num[r].assign(static_cast<size_t>(n * m), 0.0);
    for (int64_t e = 0; e < n; ++e) {
      double* p = element_ptr(x, e);
      const double orig = *p;
      *p = orig + opts.eps;
      std::vector<double> fp;
      std::vector<double> fm;
      try {
        fp = eval_flat();
        *p = orig - opts.eps;
        fm = eval_flat();
      } catch (...) {
        *p = orig;
        throw;
      }
      *p = orig;
      for (int64_t j = 0; j < m; ++j) num[r][e * m + j] = (fp[j] - fm[j]) / (2 * opts.eps);
    }
  }

  // ---- analytical: vector-Jacobian products for a set of probes
  variable_list rg_inputs;
  for (size_t i : rg) rg_inputs.push_back(inputs[i]);

  bool full = m <= opts.full_jacobian_max_outputs;
  int n_probes = m == 0 ? 0 : (full ? static_cast<int>(m) : std::max(1, opts.num_projections));
  std::mt19937_64 rng(0x5eedULL);
  std::uniform_real_distribution<double> unif(-1.0, 1.0);

  for (int probe = 0; probe < n_probes; ++probe) {
    std::vector<double> v(static_cast<size_t>(m), 0.0);
    size_t only_out = SIZE_MAX;  // for a unit probe: the checked output it lies in
    if (full) {
      v[static_cast<size_t>(probe)] = 1.0;
      for (size_t j = 0; j < outk.size(); ++j)
        if (probe >= out_offset[j]) only_out = j;
    } else {
      for (auto& x : v) x = unif(rng);
    }
    // roots and grad_outputs for the engine
    variable_list roots, gouts;
    std::vector<size_t> not_recorded;
    for (size_t j = 0; j < outk.size(); ++j) {
      if (only_out != SIZE_MAX && j != only_out) continue;
      const Tensor& o = outs[outk[j]];
      if (!o.requires_grad()) {
        not_recorded.push_back(outk[j]);
        continue;
      }
      std::vector<double> part(v.begin() + out_offset[j], v.begin() + out_offset[j] + o.numel());
      roots.push_back(o);
      gouts.push_back(make_like(part, o));
    }
    variable_list ana;
    if (!roots.empty()) ana = grad(roots, rg_inputs, gouts, /*retain_graph=*/true, /*create_graph=*/false,
                                   /*allow_unused=*/true);
    ana.resize(rg.size());

    for (size_t r = 0; r < rg.size(); ++r) {
      const Tensor& x = inputs[rg[r]];
      int64_t n = x.numel();
      std::vector<double> a(static_cast<size_t>(n), 0.0);
      if (ana[r].defined()) {
        if (!ana[r].sizes().equals(x.sizes()))
          throw std::runtime_error("[gradcheck] the gradient of input " + std::to_string(rg[r]) + " has shape " +
                                   list_str(ana[r].sizes()) + " but the input has shape " + list_str(x.sizes()));
        if (opts.check_grad_dtypes && ana[r].dtype() != x.dtype())
          throw std::runtime_error(std::string("[gradcheck] the gradient of input ") + std::to_string(rg[r]) +
                                   " has dtype " + dtype_name(ana[r].dtype()) + " but the input has dtype " +
                                   dtype_name(x.dtype()));
        a = values_of(ana[r]);
      }
      std::vector<double> nv(static_cast<size_t>(n), 0.0);
      for (int64_t e = 0; e < n; ++e) {
        const double* row = num[r].data() + e * m;
        if (full) {
          nv[e] = row[probe];
        } else {
          double s = 0;
          for (int64_t j = 0; j < m; ++j) s += v[j] * row[j];
          nv[e] = s;
        }
      }
      // compare
      double max_diff = 0;
      int64_t max_at = -1;
      std::vector<int64_t> bad;
      for (int64_t e = 0; e < n; ++e) {
        double d = std::fabs(a[e] - nv[e]);
        bool ok = d <= opts.atol + opts.rtol * std::fabs(nv[e]);
        if (std::isnan(a[e]) != std::isnan(nv[e])) ok = false;
        if (max_at < 0 || d > max_diff || (std::isnan(d) && !std::isnan(max_diff))) {
          max_diff = d;
          max_at = e;
        }
        if (!ok) bad.push_back(e);
      }
      if (bad.empty()) continue;
      std::ostringstream os;
      os << "[gradcheck] Jacobian mismatch for input " << rg[r] << " (shape " << list_str(x.sizes()) << ")";
      if (full) {
        size_t k = outk[only_out];
        os << " and output " << k << " element " << list_str(unravel(probe - out_offset[only_out], outs[k].sizes()))
           << " (shape " << list_str(outs[k].sizes()) << ")";
      } else {
        os << " in random projection " << probe << " of the outputs";
      }
      os << ": " << bad.size() << " of " << n << " elements differ (atol " << opts.atol << ", rtol " << opts.rtol
         << ")\n";
      for (size_t b = 0; b < bad.size() && b < 8; ++b) {
        int64_t e = bad[b];
        os << "  input element " << list_str(unravel(e, x.sizes())) << ": numerical " << fmt(nv[e]) << " vs analytical "
           << fmt(a[e]) << "\n";
      }
      if (bad.size() > 8) os << "  ...\n";
      os << "  max difference " << fmt(max_diff) << " at input element "
         << list_str(unravel(std::max<int64_t>(max_at, 0), x.sizes())) << " (numerical "
         << fmt(nv[std::max<int64_t>(max_at, 0)]) << ", analytical " << fmt(a[std::max<int64_t>(max_at, 0)]) << ")";
      if (!ana[r].defined()) os << "\n  the analytical gradient is undefined (no path from the outputs to this input)";
      for (size_t k : not_recorded)
        os << "\n  output " << k << " does not require grad (its op recorded no backward)";
      throw std::runtime_error(os.str());
    }
  }
  return true;
}

bool gradgradcheck(const std::function<variable_list(const variable_list&)>& fn, const variable_list& inputs,
                   GradcheckOptions opts) {
  validate_inputs(inputs, "gradgradcheck");
  const size_t n_in = inputs.size();
  std::vector<size_t> rg;
  for (size_t i = 0; i < n_in; ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) rg.push_back(i);

  // One random grad_output per differentiable output: extra inputs of the checked function.
  variable_list outs;
  {
    EnableGradGuard eg;
    outs = fn(inputs);
  }
  std::vector<size_t> outk;
  for (size_t k : checked_outputs(outs))
    if (outs[k].requires_grad()) outk.push_back(k);
  if (outk.empty()) throw std::invalid_argument("[gradgradcheck] no output of the function requires grad");
  std::mt19937_64 rng(0x9e3779b97f4a7c15ULL);
  std::uniform_real_distribution<double> unif(-1.0, 1.0);
  variable_list all = inputs;
  for (size_t k : outk) {
    std::vector<double> v(static_cast<size_t>(outs[k].numel()));
    for (auto& x : v) x = unif(rng);
    NoGradGuard ng;
    Tensor t = tensor(v, TensorOptions().dtype(kFloat64)).reshape(outs[k].sizes()).contiguous();
    t.requires_grad_(true);
    all.push_back(t);
  }
  outs.clear();

  auto first = [fn, n_in, rg, outk](const variable_list& args) {
    variable_list in(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(n_in));
    variable_list o = fn(in);
    variable_list roots, gouts;
    for (size_t j = 0; j < outk.size(); ++j) {
      size_t k = outk[j];
      if (k >= o.size() || !o[k].defined() || !o[k].requires_grad()) continue;
      roots.push_back(o[k]);
      const Tensor& v = args[n_in + j];
      gouts.push_back(v.dtype() == o[k].dtype() ? v : v.to(o[k].dtype()));
    }
    variable_list xs;
    for (size_t i : rg) xs.push_back(in[i]);
    variable_list g;
    if (!roots.empty()) g = grad(roots, xs, gouts, /*retain_graph=*/true, /*create_graph=*/true, /*allow_unused=*/true);
    g.resize(xs.size());
    for (size_t r = 0; r < xs.size(); ++r)
      if (!g[r].defined()) g[r] = zeros_like(xs[r]);
    return g;
  };
  return gradcheck(first, all, opts);
}

}  // namespace troupe::autograd
