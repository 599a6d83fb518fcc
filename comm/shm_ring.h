// ShmRing: a single-producer, single-consumer ring of byte records in memory that two processes of one
// node share (an MPI shared-memory window; comm/mpi_lane.cpp puts the heads of the lane's messages
// between the ranks of a node in one, from each rank to each other). Internal to comm/ (and its tests).
//
//   ShmRing::init(mem, cap);               // once, by the owner of the memory, before either side uses it
//   ShmRing ring(mem, cap);                // a view; producer and consumer each hold one
//   ring.push(kind, bytes, n);             // producer: false when the ring has no room (try again later)
//   if (ring.peek(&kind, &view)) { ... ring.pop(); }   // consumer: the oldest record, then consume it
//
// A record is an 8-byte header (its length and kind) and its bytes, padded to 8; a record that would run
// past the end of the ring is put at its start instead, after a wrap marker. The producer publishes a
// record with a release store of `head` once its bytes are written; the consumer reads it in place (no
// copy) and frees it with a release store of `tail`. Both counters grow without bound (byte counts; the
// position is the count modulo the capacity, a power of two).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>

namespace troupe::comm {

class ShmRing {
 public:
  /// The bytes before the records: the two counters, each on a cache line of its own.
  static constexpr size_t kCtlBytes = 128;
  /// The shared bytes a ring of capacity `cap` takes.
  static constexpr size_t bytes(size_t cap) { return kCtlBytes + cap; }
  static constexpr uint32_t kWrap = 0xffffffffu;  // the rest of the ring to its end is unused

  /// Makes `mem` (bytes(cap) bytes, 64-byte aligned) an empty ring; `cap` a power of two of at least 4 KB.
  static void init(void* mem, size_t cap) {
    check_cap(cap);
    auto* c = new (mem) Ctl{};
    c->head.store(0, std::memory_order_relaxed);
    c->tail.store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
  }

  ShmRing(void* mem, size_t cap)
      : ctl_(static_cast<Ctl*>(mem)), data_(static_cast<char*>(mem) + kCtlBytes), cap_(cap), mask_(cap - 1) {
    check_cap(cap);
  }

  size_t capacity() const { return cap_; }
  /// The longest record push() takes (a quarter of the ring, so that several are in flight).
  size_t max_record() const { return cap_ / 4 - kHeader; }

  /// Producer: appends a record of `kind` (not kWrap) holding `n` bytes from `p` (n <= max_record());
  /// false when the consumer has not yet freed room for it.
  bool push(uint32_t kind, const void* p, size_t n) {
    if (n > max_record() || kind == kWrap) {
      throw std::invalid_argument("[shm_ring] a record of " + std::to_string(n) + " bytes (at most " +
                                  std::to_string(max_record()) + ") or of the reserved kind");
    }
    const uint64_t h = ctl_->head.load(std::memory_order_relaxed);  // only the producer writes it
    const size_t need = kHeader + pad(n);
    const size_t pos = static_cast<size_t>(h & mask_);
    const size_t to_end = cap_ - pos;  // a multiple of 8: every record is
    const uint64_t advance = need <= to_end ? need : to_end + need;
    if (h + advance - ctl_->tail.load(std::memory_order_acquire) > cap_) return false;
    size_t at = pos;
    if (need > to_end) {
      put_header(at, 0, kWrap);
      at = 0;
    }
    put_header(at, static_cast<uint32_t>(n), kind);
    if (n) std::memcpy(data_ + at + kHeader, p, n);
    ctl_->head.store(h + advance, std::memory_order_release);
    return true;
  }

  /// Producer: whether a record of `n` bytes would fit now.
  bool fits(size_t n) const {
    const uint64_t h = ctl_->head.load(std::memory_order_relaxed);
    const size_t need = kHeader + pad(n);
    const size_t to_end = cap_ - static_cast<size_t>(h & mask_);
    const uint64_t advance = need <= to_end ? need : to_end + need;
    return h + advance - ctl_->tail.load(std::memory_order_acquire) <= cap_;
  }

  /// Consumer: whether a record is there.
  bool ready() const { return ctl_->head.load(std::memory_order_acquire) != ctl_->tail.load(std::memory_order_relaxed); }

  /// Consumer: the oldest record (its kind and bytes, in place: valid until pop()), or false when none.
  /// A record whose length runs past the ring is an error (the memory was overwritten).
  bool peek(uint32_t* kind, std::string_view* out) {
    uint64_t t = ctl_->tail.load(std::memory_order_relaxed);  // only the consumer writes it
    const uint64_t h = ctl_->head.load(std::memory_order_acquire);
    // Records start on the 8-byte grid and at most the capacity is published: else a header would be
    // read past the ring's end, or wrap markers followed round the ring for ever.
    if ((t & 7) != 0 || h - t > cap_) {
      throw std::runtime_error("[shm_ring] counters head " + std::to_string(h) + ", tail " + std::to_string(t) + " (ring of " +
                               std::to_string(cap_) + " bytes): the shared memory was overwritten");
    }
    while (t != h) {
      const size_t pos = static_cast<size_t>(t & mask_);
      uint32_t len = 0, k = 0;
      std::memcpy(&len, data_ + pos, 4);
      std::memcpy(&k, data_ + pos + 4, 4);
      if (k == kWrap) {
        // A wrap is published with the record after it (push), so the bytes to the end are not all.
        if (t + (cap_ - pos) >= h) {
          throw std::runtime_error("[shm_ring] a wrap marker at " + std::to_string(pos) + " runs past the " +
                                   std::to_string(h - t) + " bytes published: the shared memory was overwritten");
        }
        t += cap_ - pos;
        ctl_->tail.store(t, std::memory_order_release);
        continue;
      }
      if (len > max_record() || pos + kHeader + len > cap_ || t + kHeader + pad(len) > h) {
        throw std::runtime_error("[shm_ring] a record of " + std::to_string(len) + " bytes at " + std::to_string(pos) +
                                 " runs past the ring (" + std::to_string(cap_) + " bytes, " + std::to_string(h - t) +
                                 " published): the shared memory was overwritten");
      }
      *kind = k;
      *out = std::string_view(data_ + pos + kHeader, len);
      peeked_ = kHeader + pad(len);
      return true;
    }
    return false;
  }

  /// For tests: overwrites both counters (what another process scribbling on the memory would do).
  void overwrite_counters(uint64_t head, uint64_t tail) {
    ctl_->head.store(head, std::memory_order_release);
    ctl_->tail.store(tail, std::memory_order_release);
  }

  /// Consumer: frees the record the last peek() returned.
  void pop() {
    if (!peeked_) return;
    ctl_->tail.store(ctl_->tail.load(std::memory_order_relaxed) + peeked_, std::memory_order_release);
    peeked_ = 0;
  }

 private:
  struct Ctl {
    alignas(64) std::atomic<uint64_t> head;
    alignas(64) std::atomic<uint64_t> tail;
  };
  static_assert(sizeof(Ctl) == kCtlBytes);
  static_assert(std::atomic<uint64_t>::is_always_lock_free);
  static constexpr size_t kHeader = 8;
  static constexpr size_t pad(size_t n) { return (n + 7) & ~size_t{7}; }
  static void check_cap(size_t cap) {
    if (cap < 4096 || (cap & (cap - 1)) != 0 || cap > (size_t{1} << 31)) {
      throw std::invalid_argument("[shm_ring] capacity " + std::to_string(cap) + " (a power of two, 4 KB .. 2 GB)");
    }
  }
  void put_header(size_t at, uint32_t len, uint32_t kind) {
    std::memcpy(data_ + at, &len, 4);
    std::memcpy(data_ + at + 4, &kind, 4);
  }

  Ctl* ctl_;
  char* data_;
  size_t cap_, mask_;
  size_t peeked_ = 0;  // consumer: the bytes the last peek() returned take (0: none)
};

}  // namespace troupe::comm
