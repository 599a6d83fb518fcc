// Internal: a switch for tests. Pooling on a device without pooling kernels (CUDA) runs through index
// ops (pool.cpp, "pooling through index ops"); turned on, CPU tensors take that path too, so that it is
// compared with the CPU kernels on a machine without a GPU.
#pragma once

namespace troupe::detail {

/// This thread's switch (default off).
bool& pool_index_path_on_cpu();

}  // namespace troupe::detail
