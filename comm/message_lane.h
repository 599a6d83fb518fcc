// MessageLane: point-to-point byte messages between the processes of one MPI job, for a layer above that
// frames its own messages (the actor layer's lane: Calls and Replies between processes, actors/system.cpp).
// A message is a head (bytes) followed by zero or more bodies (tensors), each body one MPI message of its
// own, sent from and received into the tensor's memory (never element by element), or, to a rank of this
// node, pieces in the shared-memory ring (below).
//
//   auto lane = comm::make_message_lane(world);          // collective over the world (MPI_Comm_dup)
//   lane->post(1, head, {t});                            // never blocks; t is kept until it has left
//   while (auto m = lane->poll()) { ... lane->recv_body(m->source, kFloat32, {4, 4}, 10s) ... }
//
// Heads to a rank of the same node travel in a shared-memory ring from this rank to that one (the
// receiver reads them in place; no MPI call on either side), and so do bodies of up to a quarter of the
// ring; larger bodies, and everything to other nodes, by MPI. TROUPE_LANE_SHM=0 sends all by MPI.
// A rank with nothing to do sleeps in idle_wait(): the ranks on one node share a doorbell each (a futex
// word in an MPI shared-memory window), which post() rings when its destination sleeps, so a sleeping
// rank wakes as a blocked thread does (the kernel's wake-up) instead of at its next poll.
// Everything travels on a private communicator (a duplicate of MPI_COMM_WORLD, errors returned rather than
// fatal): MPI's own transport inside the job, nothing else listens. Messages posted to one destination
// arrive in posting order (MPI's non-overtaking rule: heads and bodies use one tag each).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <troupe/comm/process_group.h>

namespace troupe::comm {

/// Byte messages with tensor bodies between the ranks of an MPI world (see the file comment).
class MessageLane {
 public:
  /// A received head and the rank that sent it; `head` stays valid until the next poll().
  struct Incoming {
    int source = -1;
    std::string_view head;
  };
  virtual ~MessageLane() = default;
  /// This process's rank in the world.
  virtual int rank() const = 0;
  /// The world's size.
  virtual int size() const = 0;
  /// Posts `head` (not empty), then each of `bodies` (contiguous CPU tensors), to `dest` and returns at once: the
  /// bytes leave as the peer takes them, the head and tensors are kept until then. Thread-safe; posts
  /// to one destination arrive in the order they were made. Throws CommError when MPI refuses.
  /// `awaited`: the poster will wait for an answer to this message (a request): then a message its peer
  /// reads itself (peer_reads) is polled to its end as others above the eager limit, which measured
  /// faster for requests (see peer_reads).
  /// `head` is moved from only when it must be kept; one copied into a shared-memory ring at once is left
  /// as it was, so that the caller may encode its next head into the same buffer.
  virtual void post(int dest, std::string&& head, std::vector<Tensor> bodies, bool awaited = false) = 0;
  /// One look that never blocks: the next head from any rank, or nullopt (also completes sends that
  /// finished). One thread at a time (the caller serialises polls and recv_body).
  virtual std::optional<Incoming> poll() = 0;
  /// Lets go of the head the last poll() handed out (its bodies received), as the next poll() would: its
  /// receive is posted again, or its record in the ring freed, so that a look for the next head (a
  /// sleeper's, MessageLane::polling's end) does not take it for a new one. The poller's thread.
  virtual void release_head() = 0;
  /// The next body from `source` in a new tensor of `dtype` and `shape` (the caller bounds its size),
  /// received straight into it; a message of another size is consumed and refused, naming both sizes.
  /// Waits at most `timeout`, or until abort(): CommError then.
  virtual Tensor recv_body(int source, ScalarType dtype, const std::vector<int64_t>& shape,
                           std::chrono::milliseconds timeout) = 0;
  /// Receives and drops the next body from `source`, of `nbytes` bytes (a message whose head could not be
  /// decoded: its bodies are consumed so that the next head lines up). Waits as recv_body does.
  virtual void skip_body(int source, int64_t nbytes, std::chrono::milliseconds timeout) = 0;
  /// Makes recv_body give up at once from now on (shutdown).
  virtual void abort() = 0;
  /// Posted messages (heads and bodies) not yet sent that need this process to poll MPI to move: those
  /// above MPI's eager limit that the peer does not read itself (a smaller one is copied out as it is
  /// posted and reaches the peer by itself, as does one peer_reads; its request is reclaimed at the next
  /// post or poll), and records waiting for room in a ring. Never blocks: while another thread posts, the
  /// count of the last look (a post that leaves such sends rings this rank's doorbell).
  virtual size_t pending_sends() = 0;
  /// Sleeps until a rank of this node posts to this one (its doorbell) or `timeout` passes; returns at
  /// once when a head is already there and no other thread polls (polling(true): that one reads it), or
  /// when a send needs polling to move. Call it when a poll found nothing; one thread at a time.
  virtual void idle_wait(std::chrono::microseconds timeout) = 0;
  /// Another thread than idle_wait's starts (true) or ends (false) polling this rank's messages (a
  /// thread waiting for a reply reads it itself): while one polls, posts from this node do not wake a
  /// sleeping idle_wait (a wake-up per message, taking a core from the poller); the last to end wakes it
  /// when a head or an unfinished send is there. Calls nest (a count).
  virtual void polling(bool on) = 0;
  /// Wakes this rank's idle_wait now if it sleeps (a poller that stops polling before its message came,
  /// and leaves it to the sleeper).
  virtual void wake_idle() = 0;
  /// The largest message (head or body) MPI sends eagerly between the ranks of this node: copied out as
  /// it is posted, it reaches the peer without this process polling again (see pending_sends).
  virtual int64_t eager_bytes() const = 0;
  /// True when a message above the eager limit to `dest` is copied by `dest` itself, straight from this
  /// process's memory (Open MPI's single copy between the ranks of a node: CMA, XPMEM or KNEM): post()
  /// then returns at once for a message of at most 256 KB that is not `awaited`, as for an eager one,
  /// with at most a few such under way (it waits for the oldest), and pending_sends() does not count
  /// them. TROUPE_LANE_READER_SENDS=0 turns it off.
  virtual bool peer_reads(int dest) const = 0;
  /// How many pieces of messages posted to peers that read them (peer_reads) this process does not yet
  /// know to be complete (it learns at its next post or poll): a thread waiting for a reply to such a
  /// message keeps polling while its own message is being read, not only its usual short while.
  virtual size_t peer_reads_under_way() const = 0;
  /// True when every rank is on this node (every one rings the doorbell; else idle_wait's timeout is
  /// the latency for messages from other nodes).
  virtual bool all_on_node() const = 0;
  /// True when `rank` shares this node with this process (MPI_COMM_TYPE_SHARED); this process is.
  virtual bool on_node(int rank) const = 0;
  /// The largest head that reaches `dest` in one piece that post() copies out at once: one record of the
  /// shared-memory ring to a rank of this node (a quarter of the ring), else the eager limit. A larger
  /// head goes by rendezvous (copied twice, and moved only while this process polls).
  virtual int64_t head_bytes(int dest) const = 0;
  /// The largest head this process receives straight into a receive it posted ahead (one MPI message);
  /// a larger one is announced by an empty head and follows on a tag of its own (two messages and a
  /// probe). Senders to a rank of another node keep heads within it (see the actors' lane budget).
  virtual int64_t slot_bytes() const = 0;
  /// The largest body that travels in the shared-memory ring to `dest` (in pieces the peer copies out
  /// while the next ones go in; post() returns once they are all in), or -1 when bodies to it go by MPI.
  virtual int64_t ring_body_bytes(int dest) const = 0;
  /// Whether `t`'s memory lies in a shared-memory arena this rank receives bodies into: a body of at most
  /// ring_body_bytes from a rank of this node, copied once, by its sender, when the arena had room; the
  /// tensor stays there (its pages go back to the sender when it is freed).
  virtual bool in_arena(const Tensor& t) const = 0;
};

/// A lane over the world's processes: a duplicate of MPI_COMM_WORLD (collective: every rank calls it).
/// Null when `world` is not the mpi backend's world group. Defined when troupe is built with MPI
/// (TROUPE_HAVE_MPI).
std::shared_ptr<MessageLane> make_message_lane(const ProcessGroupPtr& world);

namespace lane_testing {
/// For tests only: overwrites the counters of the shared-memory ring from `lane`'s rank to `dest` (as a
/// process scribbling on the node's shared memory would); false when there is no ring to `dest`.
bool overwrite_ring_counters(MessageLane& lane, int dest, uint64_t head, uint64_t tail);
}  // namespace lane_testing

}  // namespace troupe::comm
