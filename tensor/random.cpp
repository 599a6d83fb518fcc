// The CPU generator (mt19937 with PyTorch's seeding and state layout) and the random ops: rand, randn,
// randint, randperm, bernoulli, rand_like, randn_like, normal_, uniform_, bernoulli_, random_.
// The kernels for uniform_/normal_ are in cpu/random_kernels.cpp; the others are small enough to live
// here. Tensors on another device are filled on the CPU (from the CPU generator) and copied over.
#include "random.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

#include "autograd.h"
#include "ops.h"
#include "warning.h"

namespace troupe {

// ============================================================ Generator

Generator::Generator(uint64_t seed) { seed_engine(seed); }

Generator::Generator(const Generator& o) { *this = o; }

Generator& Generator::operator=(const Generator& o) {
  if (this == &o) return *this;
  std::scoped_lock lock(mutex_, o.mutex_);
  seed_ = o.seed_;
  left_ = o.left_;
  seeded_ = o.seeded_;
  next_ = o.next_;
  state_ = o.state_;
  next_double_normal_ = o.next_double_normal_;
  next_float_normal_ = o.next_float_normal_;
  return *this;
}

void Generator::seed_engine(uint64_t seed) {
  seed_ = seed;
  seeded_ = true;
  state_[0] = static_cast<uint32_t>(seed & 0xffffffffu);
  for (int j = 1; j < kN; ++j)
    state_[j] = 1812433253u * (state_[j - 1] ^ (state_[j - 1] >> 30)) + static_cast<uint32_t>(j);
  left_ = 1;
  next_ = 0;
}

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  seed_engine(seed);
  next_double_normal_.reset();
  next_float_normal_.reset();
}

uint64_t Generator::initial_seed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return seed_;
}

namespace {
constexpr uint32_t kMatrixA = 0x9908b0dfu;
inline uint32_t mt_twist(uint32_t u, uint32_t v) {
  uint32_t mix = (u & 0x80000000u) | (v & 0x7fffffffu);
  return (mix >> 1) ^ ((v & 1u) ? kMatrixA : 0u);
}
}  // namespace

void Generator::twist() {
  uint32_t* p = state_.data();
  left_ = kN;
  next_ = 0;
  for (int j = kN - kM + 1; --j; ++p) *p = p[kM] ^ mt_twist(p[0], p[1]);
  for (int j = kM; --j; ++p) *p = p[kM - kN] ^ mt_twist(p[0], p[1]);
  *p = p[kM - kN] ^ mt_twist(p[0], state_[0]);
}

namespace {
// Byte offsets of PyTorch's CPUGeneratorImplState (CPUGeneratorImplStateLegacy + float sample).
constexpr size_t kOffSeed = 0, kOffLeft = 8, kOffSeeded = 12, kOffNext = 16, kOffState = 24;
constexpr size_t kOffNormalX = 5016, kOffNormalY = 5024, kOffNormalRho = 5032, kOffNormalValid = 5040;
constexpr size_t kLegacySize = 5048;
constexpr size_t kOffFloatSample = 5048, kOffFloatValid = 5052;

template <typename T>
void put(std::vector<uint8_t>& b, size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof(T));
}
template <typename T>
T get(const std::vector<uint8_t>& b, size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}
}  // namespace

std::vector<uint8_t> Generator::get_state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<uint8_t> b(kStateSize, 0);
  put<uint64_t>(b, kOffSeed, seed_);
  put<int32_t>(b, kOffLeft, left_);
  put<int32_t>(b, kOffSeeded, seeded_ ? 1 : 0);
  put<uint64_t>(b, kOffNext, next_);
  for (int i = 0; i < kN; ++i) put<uint64_t>(b, kOffState + 8 * i, state_[i]);
  put<double>(b, kOffNormalX, 0.0);
  put<double>(b, kOffNormalY, next_double_normal_ ? *next_double_normal_ : 0.0);
  put<double>(b, kOffNormalRho, 0.0);
  put<int32_t>(b, kOffNormalValid, next_double_normal_ ? 1 : 0);
  put<float>(b, kOffFloatSample, next_float_normal_ ? *next_float_normal_ : 0.0f);
  b[kOffFloatValid] = next_float_normal_ ? 1 : 0;
  return b;
}

void Generator::set_state(const std::vector<uint8_t>& b) {
  if (b.size() != kStateSize && b.size() != kLegacySize)
    throw std::invalid_argument("[set_state] Expected either a CPUGeneratorImplStateLegacy of size " +
                                std::to_string(kLegacySize) + " or a CPUGeneratorImplState of size " +
                                std::to_string(kStateSize) + " but found the input RNG state size to be " +
                                std::to_string(b.size()));
  const int32_t left = get<int32_t>(b, kOffLeft);
  const uint64_t next = get<uint64_t>(b, kOffNext);
  if (left < 1 || left > kN || next > static_cast<uint64_t>(kN) || next + static_cast<uint64_t>(left) != kN + 1u)
    if (!(left == 1 && next == 0))
      throw std::invalid_argument("[set_state] inconsistent mt19937 position: left=" + std::to_string(left) +
                                  ", next=" + std::to_string(next));
  std::lock_guard<std::mutex> lock(mutex_);
  seed_ = get<uint64_t>(b, kOffSeed);
  left_ = left;
  seeded_ = get<int32_t>(b, kOffSeeded) != 0;
  next_ = static_cast<uint32_t>(next);
  for (int i = 0; i < kN; ++i) state_[i] = static_cast<uint32_t>(get<uint64_t>(b, kOffState + 8 * i));
  next_double_normal_.reset();
  if (get<int32_t>(b, kOffNormalValid) != 0) next_double_normal_ = get<double>(b, kOffNormalY);
  next_float_normal_.reset();
  if (b.size() == kStateSize && b[kOffFloatValid] != 0) next_float_normal_ = get<float>(b, kOffFloatSample);
}

Generator& default_generator() {
  static Generator gen(Generator::kDefaultSeed);
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

uint64_t initial_seed() { return default_generator().initial_seed(); }

// ============================================================ helpers

namespace {

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

void check_floating(ScalarType dt, const char* op) {
  if (!is_floating_point(dt))
    throw std::invalid_argument(std::string("[") + op + "] expected a floating point dtype, but got torch." +
                                dtype_name(dt));
}

void check_sizes(IntArrayRef sizes, const char* op) {
  for (auto s : sizes)
    if (s < 0)
      throw std::invalid_argument(std::string("[") + op + "] Trying to create tensor with negative dimension " +
                                  std::to_string(s) + ": " + list_str(sizes));
}

/// Runs fill(cpu_tensor) on `t` itself when it is on the CPU, else on a CPU tensor copied into `t`.
template <typename F>
void fill_via_cpu(const Tensor& t, F&& fill) {
  if (t.is_cpu()) {
    fill(t);
    return;
  }
  Tensor c = empty(t.sizes(), TensorOptions().dtype(t.dtype()));
  fill(c);
  NoGradGuard ng;
  Tensor dst = t;
  dst.copy_(c);
}

/// Records the in-place random op `name` on `t`: no gradient flows to the old value.
void record_random_inplace(const char* name, Tensor& t) {
  t.bump_version();
  if (t.requires_grad() || (t.is_view() && Tensor(t.impl()->view_base).requires_grad()))
    autograd::record_inplace(
        name, t, {}, [](const autograd::variable_list& g) { return autograd::variable_list{zeros_like(g[0])}; },
        false);
}

const char* c10_type_name(ScalarType t) {
  switch (t) {
    case kBool: return "bool";
    case kUInt8: return "unsigned char";
    case kInt32: return "int";
    case kInt64: return "long";
    case kFloat16: return "c10::Half";
    case kBFloat16: return "c10::BFloat16";
    case kFloat32: return "float";
    case kFloat64: return "double";
  }
  return "?";
}

/// The integers a dtype holds exactly: [lo, hi] (PyTorch's check_from_to_in_range).
void dtype_int_range(ScalarType t, int64_t& lo, int64_t& hi) {
  switch (t) {
    case kBool: lo = 0; hi = 1; return;
    case kUInt8: lo = 0; hi = 255; return;
    case kInt32: lo = std::numeric_limits<int32_t>::min(); hi = std::numeric_limits<int32_t>::max(); return;
    case kInt64: lo = std::numeric_limits<int64_t>::min(); hi = std::numeric_limits<int64_t>::max(); return;
    case kFloat16: lo = -(int64_t(1) << 11); hi = int64_t(1) << 11; return;
    case kBFloat16: lo = -(int64_t(1) << 8); hi = int64_t(1) << 8; return;
    case kFloat32: lo = -(int64_t(1) << 24); hi = int64_t(1) << 24; return;
    case kFloat64: lo = -(int64_t(1) << 53); hi = int64_t(1) << 53; return;
  }
  throw std::invalid_argument("[random] no integer range for dtype code " + std::to_string(static_cast<int>(t)));
}

void check_from_to(ScalarType dt, int64_t from, int64_t to, const char* op) {
  if (from >= to)
    throw std::invalid_argument(std::string("[") + op + "] random_ expects 'from' to be less than 'to', but got from=" +
                                std::to_string(from) + " >= to=" + std::to_string(to));
  int64_t lo, hi;
  dtype_int_range(dt, lo, hi);
  if (is_floating_point(dt)) {
    // PyTorch's check_from_to_in_range: beyond the dtype's finite range is an error; beyond the integers
    // it holds exactly, 2^digits, only a warning.
    if (dt == kFloat16) {
      if (from < -65504 || from > 65504)
        throw std::invalid_argument(std::string("[") + op + "] from is out of bounds for " + c10_type_name(dt));
      if (to - 1 < -65504 || to - 1 > 65504)
        throw std::invalid_argument(std::string("[") + op + "] to - 1 is out of bounds for " + c10_type_name(dt));
    }
    int digits = 0;
    for (int64_t h = hi; h > 1; h >>= 1) ++digits;
    auto warn_range = [&](int64_t v, const char* name) {
      if (v < lo || v > hi)
        TROUPE_WARN(name, " is out of bounds [-(2^", digits, "), 2^", digits, "]. Due to precision limitations ",
                    c10_type_name(dt), " can support discrete uniform distribution only within this range. This "
                    "warning will become an error in version 1.7 release, please fix the code in advance");
    };
    warn_range(from, "from");
    warn_range(to - 1, "to - 1");
    return;
  }
  if (from < lo || from > hi)
    throw std::invalid_argument(std::string("[") + op + "] from is out of bounds for " + c10_type_name(dt));
  if (to - 1 < lo || to - 1 > hi)
    throw std::invalid_argument(std::string("[") + op + "] to - 1 is out of bounds for " + c10_type_name(dt));
}

template <typename T>
T from_int64(int64_t v) {
  if constexpr (std::is_same_v<T, bool>) return v != 0;
  else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}

Tensor to_cpu_contiguous(const Tensor& t) {
  NoGradGuard ng;
  Tensor c = t.is_cpu() ? t : t.cpu();
  return c.contiguous();
}

}  // namespace

// ============================================================ in-place fills

Tensor& normal_(Tensor& t, double mean, double std, Generator& gen) {
  check_floating(t.dtype(), "normal_");
  if (!(std >= 0.0)) throw std::invalid_argument("[normal_] normal expects std >= 0.0, but found std " + num(std));
  autograd::check_inplace(t, "normal_");
  fill_via_cpu(t, [&](const Tensor& c) { cpu::normal_fill(c, mean, std, gen); });
  record_random_inplace("NormalBackward0", t);
  return t;
}

Tensor& uniform_(Tensor& t, double from, double to, Generator& gen) {
  check_floating(t.dtype(), "uniform_");
  if (!(from <= to))
    throw std::invalid_argument("[uniform_] uniform_ expects to return a [from, to) range, but found from=" +
                                num(from) + " > to=" + num(to));
  autograd::check_inplace(t, "uniform_");
  fill_via_cpu(t, [&](const Tensor& c) { cpu::uniform_fill(c, from, to, gen); });
  record_random_inplace("UniformBackward0", t);
  return t;
}

Tensor& bernoulli_(Tensor& t, double p, Generator& gen) {
  if (!(p >= 0.0 && p <= 1.0))
    throw std::invalid_argument("[bernoulli_] bernoulli_ expects p to be in [0, 1], but got p=" + num(p));
  autograd::check_inplace(t, "bernoulli_");
  fill_via_cpu(t, [&](const Tensor& c) { cpu::bernoulli_fill(c, p, gen); });
  record_random_inplace("BernoulliBackward2", t);
  return t;
}

namespace {
Tensor& random_impl(Tensor& t, int64_t from, int64_t to, Generator& gen, const char* op) {
  check_from_to(t.dtype(), from, to, op);
  autograd::check_inplace(t, op);
  fill_via_cpu(t, [&](const Tensor& c) { cpu::random_fill(c, from, to, gen); });
  record_random_inplace("RandomBackward1", t);
  return t;
}
}  // namespace

Tensor& random_(Tensor& t, int64_t from, int64_t to, Generator& gen) { return random_impl(t, from, to, gen, "random_"); }
Tensor& random_(Tensor& t, int64_t to, Generator& gen) { return random_impl(t, 0, to, gen, "random_"); }
Tensor& random_(Tensor& t, Generator& gen) {
  autograd::check_inplace(t, "random_");
  fill_via_cpu(t, [&](const Tensor& c) { cpu::random_full_fill(c, gen); });
  record_random_inplace("RandomBackward0", t);
  return t;
}

Tensor& normal_(Tensor& t, double mean, double std) { return normal_(t, mean, std, default_generator()); }
Tensor& uniform_(Tensor& t, double from, double to) { return uniform_(t, from, to, default_generator()); }
Tensor& Tensor::bernoulli_(double p) { return troupe::bernoulli_(*this, p, default_generator()); }
Tensor& Tensor::random_(int64_t from, int64_t to) { return troupe::random_(*this, from, to, default_generator()); }
Tensor& Tensor::random_(int64_t to) { return troupe::random_(*this, to, default_generator()); }
Tensor& Tensor::random_() { return troupe::random_(*this, default_generator()); }

// ============================================================ factories

Tensor rand(IntArrayRef sizes, Generator& gen, TensorOptions opts) {
  check_floating(opts.dtype(), "rand");
  check_sizes(sizes, "rand");
  Tensor t = empty(sizes, opts.requires_grad(false));
  fill_via_cpu(t, [&](const Tensor& c) { cpu::uniform_fill(c, 0.0, 1.0, gen); });
  if (opts.requires_grad()) t.requires_grad_(true);
  return t;
}

Tensor randn(IntArrayRef sizes, Generator& gen, TensorOptions opts) {
  check_floating(opts.dtype(), "randn");
  check_sizes(sizes, "randn");
  Tensor t = empty(sizes, opts.requires_grad(false));
  fill_via_cpu(t, [&](const Tensor& c) { cpu::normal_fill(c, 0.0, 1.0, gen); });
  if (opts.requires_grad()) t.requires_grad_(true);
  return t;
}

Tensor randint(int64_t low, int64_t high, IntArrayRef sizes, Generator& gen, TensorOptions opts) {
  if (!opts.has_dtype()) opts = opts.dtype(kInt64);
  check_sizes(sizes, "randint");
  check_from_to(opts.dtype(), low, high, "randint");
  if (opts.requires_grad() && !is_floating_point(opts.dtype()))
    throw std::invalid_argument("[randint] Only Tensors of floating point dtype can require gradients");
  Tensor t = empty(sizes, opts.requires_grad(false));
  fill_via_cpu(t, [&](const Tensor& c) { cpu::random_fill(c, low, high, gen); });
  if (opts.requires_grad()) t.requires_grad_(true);
  return t;
}

Tensor randperm(int64_t n, Generator& gen, TensorOptions opts) {
  if (n < 0)
    throw std::invalid_argument("[randperm] Trying to create tensor with negative dimension " + std::to_string(n) +
                                ": [" + std::to_string(n) + "]");
  if (!opts.has_dtype()) opts = opts.dtype(kInt64);
  {
    int64_t lo, hi;
    dtype_int_range(opts.dtype(), lo, hi);
    if (n > 0 && n - 1 > hi)
      throw std::invalid_argument("[randperm] n is too large for result tensor type: '" +
                                  std::string(dtype_name(opts.dtype())) + "'");
  }
  Tensor t = empty({n}, opts.requires_grad(false));
  fill_via_cpu(t, [&](const Tensor& c) {
    std::vector<int64_t> r(static_cast<size_t>(n));
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      if (n < static_cast<int64_t>(std::numeric_limits<uint32_t>::max() / 20)) {
        for (int64_t i = 0; i < n; ++i) r[i] = i;
        for (int64_t i = 0; i < n - 1; ++i) {
          int64_t z = static_cast<int64_t>(gen.random() % static_cast<uint64_t>(n - i));
          std::swap(r[i], r[z + i]);
        }
      } else {  // "inside-out" Fisher-Yates with 64-bit draws
        for (int64_t i = 0; i < n; ++i) {
          int64_t z = static_cast<int64_t>(gen.random64() % static_cast<uint64_t>(i + 1));
          r[i] = r[z];
          r[z] = i;
        }
      }
    }
    dispatch_all(c.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* p = static_cast<T*>(c.data_ptr());
      for (int64_t i = 0; i < n; ++i) p[i] = from_int64<T>(r[i]);
    });
  });
  if (opts.requires_grad()) t.requires_grad_(true);
  return t;
}

Tensor bernoulli(const Tensor& p, Generator& gen) {
  check_floating(p.dtype(), "bernoulli");
  Tensor pc = to_cpu_contiguous(p);
  Tensor out_cpu = empty(p.sizes(), TensorOptions().dtype(p.dtype()));
  dispatch_all(p.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
                  std::is_same_v<T, BFloat16>) {
      const T* pp = static_cast<const T*>(pc.data_ptr());
      T* out = static_cast<T*>(out_cpu.data_ptr());
      const int64_t n = pc.numel();
      for (int64_t i = 0; i < n; ++i) {
        const double pv = static_cast<double>(static_cast<opmath_t<T>>(pp[i]));
        if (!(pv >= 0.0 && pv <= 1.0))
          throw std::invalid_argument("[bernoulli] p must be in [0, 1], but got p=" + num(pv) + " at index " +
                                      std::to_string(i));
      }
      std::lock_guard<std::mutex> lock(gen.mutex());
      for (int64_t i = 0; i < n; ++i) {
        bool one;
        if constexpr (std::is_same_v<T, double>) {
          double u = static_cast<double>(gen.random64() & ((uint64_t(1) << 53) - 1)) * 0x1p-53;
          one = u < pp[i];
        } else {
          float u = static_cast<float>(gen.random() & ((uint32_t(1) << 24) - 1)) * 0x1p-24f;
          one = u < static_cast<float>(pp[i]);
        }
        out[i] = from_int64<T>(one ? 1 : 0);
      }
    }
  });
  Tensor out = p.is_cpu() ? out_cpu : out_cpu.to(p.device());
  if (autograd::any_requires_grad({&p}))
    autograd::record("BernoulliBackward0", {p}, out,
                     [](const autograd::variable_list& g) { return autograd::variable_list{zeros_like(g[0])}; },
                     false);
  return out;
}

Tensor rand(IntArrayRef sizes, TensorOptions opts) { return rand(sizes, default_generator(), opts); }
Tensor randn(IntArrayRef sizes, TensorOptions opts) { return randn(sizes, default_generator(), opts); }
Tensor randint(int64_t low, int64_t high, IntArrayRef sizes, TensorOptions opts) {
  return randint(low, high, sizes, default_generator(), opts);
}
Tensor randint(int64_t high, IntArrayRef sizes, TensorOptions opts) {
  return randint(0, high, sizes, default_generator(), opts);
}
Tensor randperm(int64_t n, TensorOptions opts) { return randperm(n, default_generator(), opts); }
Tensor bernoulli(const Tensor& p) { return bernoulli(p, default_generator()); }

Tensor rand_like(const Tensor& t, std::optional<TensorOptions> opts) {
  Tensor out = empty_like(t, opts ? std::optional<TensorOptions>(opts->requires_grad(false)) : std::nullopt);
  check_floating(out.dtype(), "rand_like");
  fill_via_cpu(out, [&](const Tensor& c) { cpu::uniform_fill(c, 0.0, 1.0, default_generator()); });
  if (opts && opts->requires_grad()) out.requires_grad_(true);
  return out;
}

Tensor randn_like(const Tensor& t, std::optional<TensorOptions> opts) {
  Tensor out = empty_like(t, opts ? std::optional<TensorOptions>(opts->requires_grad(false)) : std::nullopt);
  check_floating(out.dtype(), "randn_like");
  fill_via_cpu(out, [&](const Tensor& c) { cpu::normal_fill(c, 0.0, 1.0, default_generator()); });
  if (opts && opts->requires_grad()) out.requires_grad_(true);
  return out;
}

}  // namespace troupe
