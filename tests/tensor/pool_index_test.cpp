// Pooling through index ops (tensor/pool.cpp), the path of devices without pooling kernels (CUDA): turned
// on for CPU tensors by the test switch, it must give what the CPU loops give (values, indices, first and
// second derivatives) and what PyTorch gives, so it is checked without a GPU. The fixtures and the
// finite-difference checks on this path are in conv_test.cpp (PoolIndexPath.*), beside the CPU loops' own.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "common/fixtures.h"  // tensors_close
#include "tensor/autograd.h"
#include "tensor/ops.h"
#include "tensor/pool_detail.h"

using namespace troupe;
using troupe::testing::tensors_close;

namespace {

struct IndexPath {
  IndexPath() { detail::pool_index_path_on_cpu() = true; }
  ~IndexPath() { detail::pool_index_path_on_cpu() = false; }
};

struct Geometry {
  std::vector<int64_t> in;  // N, C, H, W (N = 0: unbatched C, H, W)
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  bool ceil_mode;
};

const std::vector<Geometry> kGeometries = {
    {{2, 3, 7, 6}, 2, 2, 2, 2, 0, 0, 1, 1, false}, {{2, 3, 7, 6}, 3, 3, 2, 2, 1, 1, 1, 1, false},
    {{1, 2, 9, 8}, 3, 2, 2, 1, 1, 1, 1, 1, true},  {{2, 1, 5, 5}, 2, 2, 2, 2, 1, 1, 1, 1, true},
    {{1, 2, 10, 9}, 3, 3, 1, 2, 1, 0, 2, 1, false}, {{0, 3, 6, 7}, 3, 2, 3, 2, 1, 1, 1, 1, true},
    {{3, 2, 4, 11}, 1, 3, 1, 3, 0, 1, 1, 2, false},
};

Tensor input_for(const Geometry& g, ScalarType dt, uint64_t seed) {
  manual_seed(seed);
  std::vector<int64_t> s = g.in;
  if (s[0] == 0) s.erase(s.begin());
  return randn(s, TensorOptions().dtype(kFloat64)).mul(3.0).to(dt);
}

std::string name_of(const Geometry& g) {
  return "in " + list_str(g.in) + " k" + std::to_string(g.kh) + "x" + std::to_string(g.kw) + " s" +
         std::to_string(g.sh) + "x" + std::to_string(g.sw) + " p" + std::to_string(g.ph) + "x" + std::to_string(g.pw) +
         " d" + std::to_string(g.dh) + "x" + std::to_string(g.dw) + (g.ceil_mode ? " ceil" : "");
}

}  // namespace

TEST(PoolIndexPath, MaxPoolMatchesTheCpuLoops) {
  for (ScalarType dt : {kFloat64, kFloat32, kBFloat16}) {
    for (const Geometry& g : kGeometries) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + name_of(g));
      Tensor x = input_for(g, dt, 7);
      auto run = [&](bool index_path) {
        std::optional<IndexPath> on;
        if (index_path) on.emplace();
        Tensor xi = x.detach().clone().requires_grad_();
        auto [out, idx] = max_pool2d_with_indices(xi, {g.kh, g.kw}, {g.sh, g.sw}, {g.ph, g.pw}, {g.dh, g.dw}, g.ceil_mode);
        manual_seed(11);
        Tensor gy = randn(out.sizes(), TensorOptions().dtype(kFloat64)).to(dt);
        (out * gy).sum().backward();
        return std::make_tuple(out.detach(), idx, xi.grad());
      };
      auto [o1, i1, g1] = run(false);
      auto [o2, i2, g2] = run(true);
      EXPECT_TRUE(tensors_close(o2, o1, 0, 0, true));
      EXPECT_TRUE(equal(i2, i1));
      EXPECT_TRUE(tensors_close(g2.to(kFloat64), g1.to(kFloat64), dt == kBFloat16 ? 1e-2 : 1e-12,
                                dt == kBFloat16 ? 1e-2 : 1e-12, true));
    }
  }
}

TEST(PoolIndexPath, AvgPoolMatchesTheCpuLoops) {
  for (ScalarType dt : {kFloat64, kFloat32, kBFloat16}) {
    for (const Geometry& g0 : kGeometries) {
      if (g0.dh != 1 || g0.dw != 1) continue;  // avg_pool2d has no dilation
      for (int variant = 0; variant < 3; ++variant) {
        const bool count_include_pad = variant != 1;
        const std::optional<int64_t> divisor = variant == 2 ? std::optional<int64_t>(5) : std::nullopt;
        SCOPED_TRACE(std::string(dtype_name(dt)) + " " + name_of(g0) + " variant " + std::to_string(variant));
        Tensor x = input_for(g0, dt, 8);
        auto run = [&](bool index_path) {
          std::optional<IndexPath> on;
          if (index_path) on.emplace();
          Tensor xi = x.detach().clone().requires_grad_();
          Tensor out = avg_pool2d(xi, {g0.kh, g0.kw}, {g0.sh, g0.sw}, {g0.ph, g0.pw}, g0.ceil_mode, count_include_pad,
                                  divisor);
          manual_seed(12);
          Tensor gy = randn(out.sizes(), TensorOptions().dtype(kFloat64)).to(dt);
          (out * gy).sum().backward();
          return std::make_pair(out.detach(), xi.grad());
        };
        auto [o1, g1] = run(false);
        auto [o2, g2] = run(true);
        const double tol = dt == kFloat64 ? 1e-12 : dt == kFloat32 ? 1e-5 : 2e-2;
        EXPECT_TRUE(tensors_close(o2.to(kFloat64), o1.to(kFloat64), tol, tol, true));
        EXPECT_TRUE(tensors_close(g2.to(kFloat64), g1.to(kFloat64), tol, tol, true));
      }
    }
  }
}

TEST(PoolIndexPath, IntegerAvgPoolingIsRefusedThere) {
  IndexPath on;
  Tensor xi = arange(16, TensorOptions().dtype(kInt64)).view({1, 1, 4, 4});
  try {
    (void)avg_pool2d(xi, 2, 2, 1);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[avg_pool2d] not implemented for dtype int64 on device cpu"),
              std::string::npos)
        << e.what();
  }
}
