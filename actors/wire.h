// The wire format of a message's Values (CAF-free): one contiguous blob, a tensor as dtype, shape and
// its bytes in one piece (never element by element). The decoder checks every size against the bytes
// that remain before it allocates, and throws ActorError on anything malformed.
//
//   blob   := magic u32 ("TRA1"), count u32, value*count
//   value  := tag u8, then: none | bool u8 | int i64 | float f64 | string (len u64, bytes)
//             | Tensor (dtype u8: 255 undefined; ndim u8; dims i64*ndim; bytes numel*element_size)
//               (a tensor not on the CPU: dtype | 0x80, then its device: type u8 (1: cuda), index u8;
//               the decoder puts it on arrival_device() of it; a process without CUDA keeps it on the CPU)
//             | ActorRef (index u32 into the message's handles, rank i32, name as a string)
//             | list (count u32, value*count)        (little-endian; lists nest at most 32 deep)
//             | data-plane Tensor (tag 8: dtype u8 [device], ndim u8, dims i64*ndim, id i64): its bytes travel
//               beside the message (comm point to point, matched by the id)
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <troupe/actors/value.h>

namespace troupe::actors::wire {

/// Gives an ActorRef's handle an index in the message's side list of actor handles.
using RefEncoder = std::function<uint32_t(const ActorRef&)>;
/// Rebuilds an ActorRef from its index in the side list, its name and rank.
using RefDecoder = std::function<ActorRef(uint32_t index, std::string name, int rank)>;

/// For a tensor about to be encoded: the id under which its bytes travel on the data plane, or -1 to put
/// them in the blob.
using TensorOffloader = std::function<int64_t(const Tensor&)>;
/// For a data-plane tensor being decoded: the tensor (of that dtype and shape) its bytes will land in.
using TensorFetcher = std::function<Tensor(ScalarType dtype, const std::vector<int64_t>& shape, int64_t id)>;
/// Largest tensor a data-plane record may announce (the decoder refuses more before allocating).
inline constexpr uint64_t kMaxDataPlaneBytes = uint64_t{1} << 36;

/// Where a device named by another process (a tensor's, or one a module host is asked to move to) is in
/// this one: a CUDA device is this process's arrival device when one is set (set_cuda_arrival_device,
/// runtime.h: launch's cuda:<local_rank>); any other device, or with none set, the same.
Device arrival_device(const Device& sent);

/// Appends `values` to `out`.
void encode(const List& values, std::string& out, const RefEncoder& refs, const TensorOffloader& offload = {});
/// Decodes a whole blob; ActorError on a malformed or truncated one, or trailing bytes. A data-plane
/// tensor without `fetch` is an error.
List decode(const char* data, size_t size, const RefDecoder& refs, const TensorFetcher& fetch = {});
/// The head of a message on the lane (Calls and Replies between the processes of one MPI job, carried by
/// comm::MessageLane; actors/system.cpp):
///
///   head := magic u32 ("TRL1"), kind u8 (1 Call, 2 Reply, 3 Stop), seq u64, id u64, target u64, from_rank i32,
///           ok u8, text (len u64, bytes), bodies u32, body sizes u64*bodies, then the values' blob
///
/// A tensor of the blob whose bytes travel as a body is a data-plane record (tag 8) whose id is its body's
/// index; the bodies follow the head in index order.
struct LaneHead {
  static constexpr uint8_t kCall = 1;
  static constexpr uint8_t kReply = 2;
  /// ActorRef::stop() of the target, in its sender's sequence like a Call.
  static constexpr uint8_t kStop = 3;
  uint8_t kind = kCall;
  /// A Call's place in its sender's sequence to this process (1, 2, ...).
  uint64_t seq = 0;
  /// The request id (0: a one-way Call).
  uint64_t id = 0;
  /// A Call's target: the actor's id in its process.
  uint64_t target = 0;
  /// The sending rank.
  int32_t from_rank = -1;
  /// A Reply: ok, or `text` is the error.
  bool ok = true;
  /// A Call's method, a Reply's error text.
  std::string text;
  /// The byte size of each body, in order.
  std::vector<uint64_t> bodies;
  /// Where the blob starts in the head (set by the decoder).
  size_t blob_offset = 0;
};
/// Where `seq` sits in an encoded head (a sender fills it in last).
inline constexpr size_t kLaneSeqOffset = 5;
/// Appends the head's fields (not the blob: encode() appends it after) to `out`.
void encode_lane_head(const LaneHead& h, std::string& out);
/// Decodes a head's fields, checking every size against the bytes that remain (at most 2^20 bodies);
/// ActorError on a malformed one. The blob is data + blob_offset.
LaneHead decode_lane_head(const char* data, size_t size);

/// Fuzz entry point: decodes arbitrary bytes (ActorRefs as empty handles); true when they were a valid
/// blob. Never crashes, never allocates more than the input's size allows.
bool fuzz_decode(const uint8_t* data, size_t size);

}  // namespace troupe::actors::wire
