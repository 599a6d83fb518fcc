// The wire format of a message's Values (CAF-free): one contiguous blob, a tensor as dtype, shape and
// its bytes in one piece (never element by element). The decoder checks every size against the bytes
// that remain before it allocates, and throws ActorError on anything malformed.
//
//   blob   := magic u32 ("TRA1"), count u32, value*count
//   value  := tag u8, then: none | bool u8 | int i64 | float f64 | string (len u64, bytes)
//             | Tensor (dtype u8: 255 undefined; ndim u8; dims i64*ndim; bytes numel*element_size)
//             | ActorRef (index u32 into the message's handles, rank i32, name as a string)
//             | list (count u32, value*count)        (little-endian; lists nest at most 32 deep)
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include <troupe/actors/value.h>

namespace troupe::actors::wire {

/// Gives an ActorRef's handle an index in the message's side list of actor handles.
using RefEncoder = std::function<uint32_t(const ActorRef&)>;
/// Rebuilds an ActorRef from its index in the side list, its name and rank.
using RefDecoder = std::function<ActorRef(uint32_t index, std::string name, int rank)>;

/// Appends `values` to `out`.
void encode(const List& values, std::string& out, const RefEncoder& refs);
/// Decodes a whole blob; ActorError on a malformed or truncated one, or trailing bytes.
List decode(const char* data, size_t size, const RefDecoder& refs);
/// Fuzz entry point: decodes arbitrary bytes (ActorRefs as empty handles); true when they were a valid
/// blob. Never crashes, never allocates more than the input's size allows.
bool fuzz_decode(const uint8_t* data, size_t size);

}  // namespace troupe::actors::wire
