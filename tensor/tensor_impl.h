// TensorImpl: the shared state behind a Tensor handle (storage, geometry, dtype, autograd metadata).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "dtype.h"
#include "storage.h"

namespace troupe {

class Tensor;
namespace autograd {
struct Node;
struct AutogradMeta;
}  // namespace autograd

struct TensorImpl {
  std::shared_ptr<StorageImpl> storage;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  // in elements
  int64_t offset = 0;            // in elements
  ScalarType dtype = kFloat32;
  int64_t numel = 1;
  bool contiguous = true;
  /// For a view: the tensor whose storage it views (never itself a view). Null otherwise.
  std::shared_ptr<TensorImpl> view_base;
  /// Autograd state; null for a tensor that never took part in autograd.
  std::unique_ptr<autograd::AutogradMeta> autograd;

  TensorImpl(std::shared_ptr<StorageImpl> s, std::vector<int64_t> sz, std::vector<int64_t> st,
             int64_t off, ScalarType dt);
  ~TensorImpl();

  /// Recomputes numel and contiguity after sizes or strides change.
  void refresh();
  Device device() const { return storage->device; }
  void* data() const {
    return static_cast<char*>(storage->data) + offset * static_cast<int64_t>(element_size(dtype));
  }
};

/// Row-major strides for `sizes`.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes);

}  // namespace troupe
