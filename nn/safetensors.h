// safetensors files (https://github.com/huggingface/safetensors): the format PyTorch, JAX and the
// Hugging Face tools share for weights.
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON
//   {"__metadata__": {"key": "value", ...}, "name": {"dtype": "F32", "shape": [2, 3],
//    "data_offsets": [begin, end]}, ...}
// padded with spaces to a multiple of 8, then the byte buffer; each tensor's elements are row-major and
// little-endian at [begin, end) of the buffer, and the tensors cover the buffer exactly.
//
// troupe writes what the reference writer (the Rust crate behind the `safetensors` Python package)
// writes: compact JSON, "__metadata__" first, tensors sorted by dtype (widest alignment first, in the
// crate's dtype order) then by name, data in that order. Files are byte-identical to
// safetensors.torch.save_file for the same tensors when the metadata has at most one key (the crate
// writes several metadata keys in hash order; troupe sorts them).
#pragma once

#include <map>
#include <string>
#include <string_view>

#include <troupe/nn/module.h>

namespace troupe::nn {

/// The safetensors "__metadata__" map (string to string).
using SafetensorsMetadata = std::map<std::string, std::string>;

/// Writes `tensors` to `path` atomically (safetensors.torch.save_file). Tensors are written as CPU,
/// contiguous copies (CUDA tensors are copied to the host). Names and metadata must be valid UTF-8.
void save_safetensors(const StateDict& tensors, const std::string& path, const SafetensorsMetadata& metadata = {});
/// The bytes of a safetensors file holding `tensors` (safetensors.torch.save).
std::string serialize_safetensors(const StateDict& tensors, const SafetensorsMetadata& metadata = {});

/// Reads every tensor of a safetensors file (safetensors.torch.load_file) as contiguous CPU tensors, in
/// the order of their data in the file. Supported dtypes: F64 F32 F16 BF16 I64 I32 U8 BOOL. Throws
/// std::runtime_error naming the file and the problem for a missing, malformed or truncated file.
StateDict load_safetensors(const std::string& path);
/// load_safetensors of the bytes of a file (safetensors.torch.load).
StateDict deserialize_safetensors(std::string_view bytes);
/// The "__metadata__" map of a safetensors file (empty when it has none); reads only the header, which
/// is validated as load_safetensors validates it.
SafetensorsMetadata load_safetensors_metadata(const std::string& path);

}  // namespace troupe::nn
