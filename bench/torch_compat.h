// Moving tensors and module state between troupe and libtorch in the benchmarks that compare them
// (included after <torch/torch.h> and the troupe headers, inside no namespace of the bench).
#pragma once

#if defined(TROUPE_HAVE_LIBTORCH)
#include <string>
#include <vector>

#include <torch/torch.h>
#include <troupe/nn/module.h>

namespace {

// A libtorch tensor holding a copy of a contiguous float32 troupe tensor.
torch::Tensor to_torch(const troupe::Tensor& t) {
  troupe::Tensor c = t.detach().contiguous();
  std::vector<int64_t> sizes(c.sizes().begin(), c.sizes().end());
  return torch::from_blob(c.data_ptr<float>(), sizes, torch::kFloat32).clone();
}

// Copies every parameter and buffer of `src` into the libtorch module's entry of the same dotted
// name; false when the two name sets differ.
bool copy_state(const troupe::nn::Module& src, torch::nn::Module& dst) {
  torch::NoGradGuard no_grad;
  auto tp = dst.named_parameters();
  auto tb = dst.named_buffers();
  auto ps = src.named_parameters();
  auto bs = src.named_buffers();
  if (ps.size() != tp.size() || bs.size() != tb.size()) return false;
  for (const auto& [k, v] : ps.items()) {
    torch::Tensor* d = tp.find(k);
    if (!d || d->sizes() != torch::IntArrayRef(std::vector<int64_t>(v.sizes().begin(), v.sizes().end())))
      return false;
    d->copy_(to_torch(v));
  }
  for (const auto& [k, v] : bs.items()) {
    torch::Tensor* d = tb.find(k);
    if (!d) return false;
    if (v.scalar_type() == troupe::kFloat32) d->copy_(to_torch(v));
  }
  return true;
}

}  // namespace

#endif  // TROUPE_HAVE_LIBTORCH
