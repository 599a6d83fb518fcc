// Checkpoints in troupe's own binary format (torch.save / torch.load of a state_dict): a state_dict or a
// module's state to a file or a stream and back, and the atomic file write that every checkpoint uses.
//
// Format (version 1), all integers little-endian, written through cereal's portable binary archive:
//   "TROUPESD"            8 bytes of magic
//   u8  1                 cereal's endianness flag (1 = little-endian)
//   u32 version           kCheckpointVersion
//   u64 count             number of entries, then `count` times:
//     u64 n, n bytes      name (UTF-8, no terminator)
//     u8  dtype           0 bool, 1 uint8, 2 int32, 3 int64, 4 float16, 5 bfloat16, 6 float32, 7 float64
//     u32 ndim, ndim x i64 shape
//     u64 nbytes, nbytes  the elements, row-major, little-endian, as one blob
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>

#include <troupe/nn/module.h>

namespace troupe::nn {

/// The 8 bytes every troupe checkpoint starts with.
inline constexpr char kCheckpointMagic[9] = "TROUPESD";
/// The format version save() writes; load accepts versions up to this one.
inline constexpr uint32_t kCheckpointVersion = 1;

/// Writes `state_dict` to `path` atomically (torch.save(state_dict, path)). Tensors are saved as CPU,
/// contiguous copies of their data (CUDA tensors are copied to the host); autograd state is not saved.
void save(const StateDict& state_dict, const std::string& path);
/// Writes `state_dict` to `stream`.
void save(const StateDict& state_dict, std::ostream& stream);
/// save(module.state_dict(), path).
void save(Module& module, const std::string& path);
void save(Module& module, std::ostream& stream);
void save(const ModulePtr& module, const std::string& path);
void save(const ModulePtr& module, std::ostream& stream);

/// Reads a checkpoint written by save(): contiguous CPU tensors in the saved order. Throws
/// std::runtime_error naming the file and the problem (missing file, not a checkpoint, truncated, ...).
StateDict load_state_dict_file(const std::string& path);
/// Reads one checkpoint from `stream` (which may hold more data after it).
StateDict load_state_dict_file(std::istream& stream);

/// module.load_state_dict(load_state_dict_file(path), strict) (torch.load + load_state_dict).
IncompatibleKeys load(Module& module, const std::string& path, bool strict = true);
IncompatibleKeys load(Module& module, std::istream& stream, bool strict = true);
IncompatibleKeys load(const ModulePtr& module, const std::string& path, bool strict = true);
IncompatibleKeys load(const ModulePtr& module, std::istream& stream, bool strict = true);

/// Writes a file so that readers see the old content or the complete new one, never a partial file:
/// `write` fills a temporary `<path>.tmp.<pid>.<random>` in the same directory, which is flushed,
/// fsync'ed and renamed over `path` (the directory is fsync'ed too). On any failure the temporary file
/// is removed, `path` is left as it was, and a std::runtime_error names `fn`, the path and the cause.
void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write,
                           const std::string& fn = "nn::write_file_atomically");

}  // namespace troupe::nn
