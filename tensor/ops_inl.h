// Template definitions for ops.h.
#pragma once

#include <algorithm>

namespace troupe {

namespace detail {
Tensor finish_factory(Tensor t, const TensorOptions& opts);
}

template <typename T>
Tensor tensor(const std::vector<T>& values, TensorOptions opts) {
  using Stored = std::conditional_t<std::is_same_v<T, long long>, int64_t, T>;
  Tensor t = empty({static_cast<int64_t>(values.size())}, TensorOptions().dtype(dtype_of<Stored>::value));
  Stored* p = static_cast<Stored*>(t.data_ptr());
  for (size_t i = 0; i < values.size(); ++i) p[i] = static_cast<Stored>(values[i]);
  if (!opts.has_dtype()) opts = opts.dtype(detail::literal_dtype(dtype_of<Stored>::value));
  return detail::finish_factory(t, opts);
}

}  // namespace troupe
