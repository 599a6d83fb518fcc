// The CPU random number generator (PyTorch's CPUGeneratorImpl): a 32-bit Mersenne Twister with a
// seed, the cached second Box-Muller value, and PyTorch's byte layout for get_state/set_state.
//
// With the same seed, troupe::rand/randn/randint/randperm/bernoulli/normal_/uniform_ give bit for bit
// the numbers PyTorch 1.13 gives on an x86 CPU (tests/fixtures/random.txt). Differences that remain:
// * float32 normals of >= 16 contiguous elements reproduce PyTorch's AVX2 kernel (what PyTorch runs on
//   any AVX2 CPU); PyTorch on a CPU without AVX2 (or on ARM) uses libm there and differs in low bits.
// * bernoulli_(p) with a scalar p reproduces PyTorch builds without MKL (and any build on AMD CPUs);
//   MKL builds on Intel CPUs draw it from an MKL stream instead.
// Troupe's own numbers do not depend on the machine: the float32 kernel is plain IEEE arithmetic with
// explicit fmas (the AVX2 and scalar code give identical bits); the float64 and 16-bit paths call the
// C library's log/sin/cos (correctly rounded in practice on glibc; another libm may differ in a last bit).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "tensor.h"

namespace troupe {

/// A Mersenne Twister (mt19937) generator with PyTorch's seeding and draws.
///
/// Thread safety: random(), random64() and the normal-sample cache are not locked; callers that share a
/// generator between threads hold `mutex()` around the draws (every troupe op does). manual_seed,
/// initial_seed, get_state and set_state lock it themselves.
class Generator {
 public:
  /// libtorch's default seed (c10::detail::default_rng_seed_val).
  static constexpr uint64_t kDefaultSeed = 67280421310721ULL;
  /// Size in bytes of the state get_state returns (PyTorch's CPUGeneratorImplState).
  static constexpr size_t kStateSize = 5056;

  explicit Generator(uint64_t seed = kDefaultSeed);
  Generator(const Generator& o);
  Generator& operator=(const Generator& o);

  /// Re-seeds (torch.Generator.manual_seed): mt19937 is seeded with the low 32 bits, the full seed
  /// is kept for initial_seed(), and the cached normal samples are dropped.
  void manual_seed(uint64_t seed);
  uint64_t initial_seed() const;

  /// The state in PyTorch's layout (torch.get_rng_state(): 5056 bytes; padding bytes are zero).
  std::vector<uint8_t> get_state() const;
  /// Restores a state from get_state (or from torch.get_rng_state().numpy().tobytes()); also accepts
  /// the 5048-byte legacy layout. Throws std::invalid_argument for any other size.
  void set_state(const std::vector<uint8_t>& state);

  // ---- draws (hold mutex() when the generator is shared)
  /// The next 32 random bits (std::mt19937's output sequence).
  uint32_t random() {
    if (--left_ == 0) twist();
    uint32_t y = state_[next_++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= (y >> 18);
    return y;
  }
  /// 64 bits from two draws: the first is the high word.
  uint64_t random64() {
    const uint32_t hi = random();
    const uint32_t lo = random();
    return (static_cast<uint64_t>(hi) << 32) | lo;
  }
  /// The second value of the last scalar Box-Muller pair (normal_distribution<double>), if unused.
  std::optional<double>& next_double_normal_sample() { return next_double_normal_; }
  std::optional<float>& next_float_normal_sample() { return next_float_normal_; }

  std::mutex& mutex() const { return mutex_; }

 private:
  void seed_engine(uint64_t seed);
  void twist();

  static constexpr int kN = 624;
  static constexpr int kM = 397;
  uint64_t seed_ = kDefaultSeed;
  int left_ = 1;
  bool seeded_ = false;
  uint32_t next_ = 0;
  std::array<uint32_t, kN> state_{};
  std::optional<double> next_double_normal_;
  std::optional<float> next_float_normal_;
  mutable std::mutex mutex_;
};

/// The process-wide CPU generator used by every random op (seeded with Generator::kDefaultSeed until
/// manual_seed is called, as in libtorch).
Generator& default_generator();

// ---- the ops with an explicit generator (the ops.h versions use default_generator())
Tensor rand(IntArrayRef sizes, Generator& gen, TensorOptions opts = {});
Tensor randn(IntArrayRef sizes, Generator& gen, TensorOptions opts = {});
Tensor randint(int64_t low, int64_t high, IntArrayRef sizes, Generator& gen, TensorOptions opts = {});
Tensor randperm(int64_t n, Generator& gen, TensorOptions opts = {});
Tensor bernoulli(const Tensor& p, Generator& gen);
Tensor& normal_(Tensor& t, double mean, double std, Generator& gen);
Tensor& uniform_(Tensor& t, double from, double to, Generator& gen);
/// Fills with 0/1 drawn with probability p of 1 (Tensor::bernoulli_).
Tensor& bernoulli_(Tensor& t, double p, Generator& gen);
/// Fills with integers uniform on [from, to) (Tensor::random_).
Tensor& random_(Tensor& t, int64_t from, int64_t to, Generator& gen);
/// Fills with integers uniform on [0, to) (Tensor::random_(to)).
Tensor& random_(Tensor& t, int64_t to, Generator& gen);
/// Fills with integers uniform on [0, 2^digits] for floating dtypes, [0, max] for integer ones (Tensor::random_()).
Tensor& random_(Tensor& t, Generator& gen);

namespace cpu {
/// The CPU kernels behind CpuBackend::uniform / CpuBackend::normal, with an explicit generator.
/// `out` is a floating CPU tensor (any strides; non-contiguous tensors are filled in memory order,
/// as PyTorch's TensorIterator does). They lock gen.mutex().
void uniform_fill(const Tensor& out, double from, double to, Generator& gen);
void normal_fill(const Tensor& out, double mean, double std, Generator& gen);
/// Integers uniform on [from, to) (PyTorch's random_from_to kernel: `draw % (to - from) + from`, with
/// 64-bit draws when the range reaches 2^32 for int64/float32/float64/bfloat16). Any dtype.
void random_fill(const Tensor& out, int64_t from, int64_t to, Generator& gen);
/// Tensor::random_(): integers on [0, 2^digits] for floating dtypes (24 for float32, 53 for float64, 11 for
/// float16, 8 for bfloat16), [0, max] for integer ones, {0, 1} for bool (PyTorch's uniform_int). Any dtype.
void random_full_fill(const Tensor& out, Generator& gen);
/// 0/1 with probability p of 1 (a 53-bit uniform double < p, as PyTorch's non-MKL kernel). Any dtype.
void bernoulli_fill(const Tensor& out, double p, Generator& gen);
/// Lets the float32 normal kernel use its AVX2 code (the default, where the CPU has AVX2 and FMA) or
/// forces the scalar code; both give identical numbers. Returns the previous setting. For tests.
bool set_vectorized_normal(bool enabled);
}  // namespace cpu

}  // namespace troupe
