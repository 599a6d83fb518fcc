// cuda_bench: troupe's CUDA backend beside PyTorch on the same GPU, and beside the hardware's limit
// (cuBLAS called directly for matmul; cudaMemcpy device to device for memory-bound ops).
//
//   matmul N f32/bf16    C = A B, N x N x N: TFLOP/s (2 N^3 / time); peer cublasGemmEx
//   add 64M f32          c = a + b on 2^26 floats: GB/s counting 3 x 256 MB moved; peer cudaMemcpy (2 x 256 MB)
//   sum 64M f32          sum of 2^26 floats: GB/s counting 256 MB read; peer cudaMemcpy
//   softmax 4096x4096    softmax over rows, f32: GB/s counting 2 x 64 MB
//   add 1K f32           c = a + b on 1,024 floats: us per op (launch and allocator overhead)
//   MLP step             Linear(1024,4096) ReLU Linear(4096,1024), batch 2048, mse_loss, backward, Adam step
//   conv2d               3x3, 64 -> 64 channels, batch 32, 56x56, padding 1: forward, sum, backward (PyTorch:
//                        cuDNN, TF32 off)
//
// Timing: each case runs warm-up calls, then `reps` calls between two synchronizes; the median of 7 such
// samples. --torch runs bench/cuda_torch.py (PyTorch on the same GPU, the same cases and timing) and prints
// the ratio troupe / PyTorch (throughput: above 1 means troupe is faster; MLP step: PyTorch time / troupe time).
#include <troupe/tensor/backend.h>
#include <troupe/tensor/tensor.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#ifdef TROUPE_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <troupe/nn/functional/loss.h>
#include <troupe/nn/modules/activation.h>
#include <troupe/nn/modules/container.h>
#include <troupe/nn/modules/linear.h>
#include <troupe/optim/adam.h>
#include <troupe/tensor/cuda/cuda_backend.h>
#include <troupe/tensor/ops.h>

namespace {

using Clock = std::chrono::steady_clock;
using troupe::Tensor;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per call of f: warm-up, then the median of 7 samples of `reps` calls between synchronizes.
double seconds_per_call(const std::function<void()>& f, int reps, const std::function<void()>& sync) {
  for (int i = 0; i < 3; ++i) f();
  sync();
  std::vector<double> s;
  for (int k = 0; k < 7; ++k) {
    auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) f();
    sync();
    s.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / reps);
  }
  return median(s);
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cuda_bench: %s failed: %s\n", what, cudaGetErrorString(e));
    std::exit(2);
  }
}

struct Row {
  std::string name, unit;
  double troupe, limit;  // limit < 0: none
  bool higher_better;
};

}  // namespace

int main(int argc, char** argv) {
  bool with_torch = false, quick = false;
  std::string torch_script = "bench/cuda_torch.py";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--torch") with_torch = true;
    else if (a.rfind("--torch-script=", 0) == 0) torch_script = a.substr(15), with_torch = true;
    else if (a == "--quick") quick = true;
    else {
      std::fprintf(stderr, "usage: cuda_bench [--quick] [--torch] [--torch-script=PATH]\n");
      return 2;
    }
  }
  if (!troupe::cuda::is_available()) {
    std::printf("cuda_bench: no CUDA device; nothing to measure\n");
    return 0;
  }
  using namespace troupe;
  auto sync = [] { troupe::cuda::synchronize(); };
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const TensorOptions f32 = TensorOptions().dtype(kFloat32).device(Device(kCUDA, 0));
  std::vector<Row> rows;
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cuda_bench: cublasCreate failed\n");
    return 2;
  }
  cublasSetStream(h, cudaStreamLegacy);

  const int64_t N = quick ? 2048 : 4096;
  for (ScalarType dt : {kFloat32, kBFloat16}) {
    const char* dn = dt == kFloat32 ? "f32" : "bf16";
    Tensor a = randn({N, N}, f32).to(dt), b = randn({N, N}, f32).to(dt), c = empty({N, N}, a.options());
    double flop = 2.0 * N * N * N;
    double t = seconds_per_call([&] { c = matmul(a, b); }, 10, sync);
    // cuBLAS directly, column-major C^T = B^T A^T (the same product)
    cudaDataType_t ct = dt == kFloat32 ? CUDA_R_32F : CUDA_R_16BF;
    float one = 1, zero = 0;
    double tl = seconds_per_call([&] {
      cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, b.data_ptr(), ct, N, a.data_ptr(), ct, N, &zero,
                   c.data_ptr(), ct, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    }, 10, sync);
    rows.push_back({"matmul " + std::to_string(N) + " " + dn, "TFLOP/s", flop / t / 1e12, flop / tl / 1e12, true});
  }
  const int64_t M = quick ? (1 << 24) : (1 << 26);
  const double mb = M * 4.0;
  Tensor x = randn({M}, f32), y = randn({M}, f32), z = empty({M}, f32);
  double tcopy = seconds_per_call([&] {
    check_cuda(cudaMemcpyAsync(z.data_ptr(), x.data_ptr(), M * 4, cudaMemcpyDeviceToDevice, cudaStreamLegacy), "copy");
  }, 20, sync);
  const double copy_gbs = 2 * mb / tcopy / 1e9;
  rows.push_back({"add 64M f32", "GB/s", 3 * mb / seconds_per_call([&] { z = add(x, y); }, 20, sync) / 1e9, copy_gbs, true});
  rows.push_back({"sum 64M f32", "GB/s", mb / seconds_per_call([&] { z = sum(x); }, 20, sync) / 1e9, copy_gbs, true});
  Tensor s = randn({4096, 4096}, f32);
  rows.push_back({"softmax 4096x4096 f32", "GB/s", 2 * 4096.0 * 4096 * 4 / seconds_per_call([&] { z = softmax(s, 1); }, 20, sync) / 1e9,
                  copy_gbs, true});
  Tensor p = randn({1024}, f32), q = randn({1024}, f32);
  rows.push_back({"add 1K f32", "us/op", seconds_per_call([&] { z = add(p, q); }, 2000, sync) * 1e6, -1, false});
  {
    auto net = std::make_shared<nn::SequentialImpl>(std::make_shared<nn::LinearImpl>(1024, 4096),
                                                    std::make_shared<nn::ReLUImpl>(),
                                                    std::make_shared<nn::LinearImpl>(4096, 1024));
    net->to(Device(kCUDA, 0));
    optim::Adam opt(net->parameters(), optim::AdamOptions(1e-4));
    Tensor bx = randn({2048, 1024}, f32), by = randn({2048, 1024}, f32);
    double t = seconds_per_call([&] {
      opt.zero_grad();
      Tensor loss = nn::functional::mse_loss((*net)(bx), by);
      loss.backward();
      opt.step();
    }, 10, sync);
    rows.push_back({"MLP step b2048 1024-4096-1024 Adam", "ms", t * 1e3, -1, false});
  }
  {
    // a ResNet-style 3x3 convolution, forward and backward (input and weight gradients)
    Tensor cx = randn({32, 64, 56, 56}, f32).requires_grad_(true);
    Tensor cw = randn({64, 64, 3, 3}, f32).mul(0.05).detach().requires_grad_(true);
    double t = seconds_per_call([&] {
      cx.mutable_grad() = Tensor();
      cw.mutable_grad() = Tensor();
      conv2d(cx, cw, Tensor(), 1, 1).sum().backward();
    }, 5, sync);
    rows.push_back({"conv2d 3x3 64->64 N32 56x56 fwd+bwd", "ms", t * 1e3, -1, false});
  }
  cublasDestroy(h);

  std::map<std::string, double> torch;
  if (with_torch) {
    std::string cmd = "python3 " + torch_script + (quick ? " --quick" : "");
    FILE* f = popen(cmd.c_str(), "r");
    char line[512];
    while (f && std::fgets(line, sizeof line, f)) {
      char name[256];
      double v;
      if (std::sscanf(line, "RESULT %255[^=]= %lf", name, &v) == 2) {
        std::string k = name;
        while (!k.empty() && k.back() == ' ') k.pop_back();
        torch[k] = v;
      } else {
        std::fputs(line, stdout);
      }
    }
    if (f) pclose(f);
  }
  std::printf("\n%-36s %8s %10s %10s %10s %12s %12s\n", "case", "unit", "troupe", "PyTorch", "limit", "vs PyTorch",
              "vs limit");
  for (auto& r : rows) {
    auto it = torch.find(r.name);
    double tv = it == torch.end() ? -1 : it->second;
    auto ratio = [&](double peer) { return r.higher_better ? r.troupe / peer : peer / r.troupe; };
    char tb[32] = "-", lb[32] = "-", rt[32] = "-", rl[32] = "-";
    if (tv > 0) std::snprintf(tb, sizeof tb, "%.3g", tv), std::snprintf(rt, sizeof rt, "%.2f", ratio(tv));
    if (r.limit > 0) std::snprintf(lb, sizeof lb, "%.3g", r.limit), std::snprintf(rl, sizeof rl, "%.2f", ratio(r.limit));
    std::printf("%-36s %8s %10.3g %10s %10s %12s %12s\n", r.name.c_str(), r.unit.c_str(), r.troupe, tb, lb, rt, rl);
  }
  std::printf("(ratios: above 1 means troupe is faster; 'limit' is cuBLAS called directly for matmul and a\n"
              " device-to-device cudaMemcpy for the memory-bound rows)\n");
  return 0;
}

#else
int main() {
  std::printf("cuda_bench: built without CUDA; nothing to measure\n");
  return 0;
}
#endif
