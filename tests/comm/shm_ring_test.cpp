// comm::ShmRing (comm/shm_ring.h), the ring the lane's heads take between the ranks of a node: records
// come out in order with their bytes and kinds, across the wrap at the ring's end, between two threads
// (as between two processes: the same atomics); a full ring refuses a record until the consumer frees
// room; bad capacities, oversized records and a record overwritten in place are errors that say so.
#include <troupe/comm/shm_ring.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

using troupe::comm::ShmRing;

namespace {

/// 64-byte-aligned memory for a ring of `cap` bytes.
struct RingMem {
  explicit RingMem(size_t cap) : p(static_cast<char*>(std::aligned_alloc(64, ShmRing::bytes(cap)))) { ShmRing::init(p, cap); }
  ~RingMem() { std::free(p); }
  char* p;
};

/// Record k's bytes: its length varies (0 .. 1500) and its bytes depend on k and the position.
std::string record(uint64_t k) {
  std::string s(static_cast<size_t>((k * 7919) % 1501), '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>((k * 31 + i * 7) & 0xff);
  return s;
}

}  // namespace

TEST(ShmRing, RecordsComeOutInOrderAcrossTheWrap) {
  RingMem mem(4096);
  ShmRing prod(mem.p, 4096), cons(mem.p, 4096);
  EXPECT_EQ(prod.max_record(), 1024u - 8u);
  uint32_t kind = 0;
  std::string_view v;
  EXPECT_FALSE(cons.peek(&kind, &v));
  EXPECT_FALSE(cons.ready());
  // 700-byte records: the sixth cannot fit at the end of the ring and goes to its start behind a wrap marker.
  for (uint64_t k = 0; k < 40; ++k) {
    const std::string r(700, static_cast<char>('a' + k % 26));
    ASSERT_TRUE(prod.push(static_cast<uint32_t>(k % 3 + 1), r.data(), r.size())) << k;
    ASSERT_TRUE(cons.ready());
    ASSERT_TRUE(cons.peek(&kind, &v)) << k;
    EXPECT_EQ(kind, k % 3 + 1);
    EXPECT_EQ(v, r) << k;
    cons.pop();
  }
  // An empty record and a record of exactly max_record() bytes.
  ASSERT_TRUE(prod.push(7, nullptr, 0));
  const std::string full(prod.max_record(), 'z');
  ASSERT_TRUE(prod.push(8, full.data(), full.size()));
  ASSERT_TRUE(cons.peek(&kind, &v));
  EXPECT_EQ(kind, 7u);
  EXPECT_TRUE(v.empty());
  cons.pop();
  ASSERT_TRUE(cons.peek(&kind, &v));
  EXPECT_EQ(kind, 8u);
  EXPECT_EQ(v, full);
  cons.pop();
  EXPECT_FALSE(cons.peek(&kind, &v));
}

TEST(ShmRing, AFullRingRefusesUntilTheConsumerFreesRoom) {
  RingMem mem(4096);
  ShmRing prod(mem.p, 4096), cons(mem.p, 4096);
  const std::string r(1000, 'q');  // 1008 bytes a record with its header: four fill the ring (4032 of 4096)
  int pushed = 0;
  while (prod.push(1, r.data(), r.size())) ++pushed;
  EXPECT_EQ(pushed, 4);
  EXPECT_FALSE(prod.fits(r.size()));
  EXPECT_TRUE(prod.fits(40));  // 48 bytes are left at the end
  uint32_t kind = 0;
  std::string_view v;
  ASSERT_TRUE(cons.peek(&kind, &v));
  EXPECT_FALSE(prod.push(1, r.data(), r.size())) << "a record peeked but not popped still holds its room";
  cons.pop();
  EXPECT_TRUE(prod.push(1, r.data(), r.size())) << "a popped record's room is free again (the next one wraps)";
  for (int k = 0; k < 4; ++k) {
    ASSERT_TRUE(cons.peek(&kind, &v)) << k;
    EXPECT_EQ(v, r);
    cons.pop();
  }
  EXPECT_FALSE(cons.peek(&kind, &v));
}

TEST(ShmRing, TwoThreadsPassManyRecordsIntact) {
  constexpr size_t kCap = 64 << 10;
  constexpr uint64_t kN = 200000;
  RingMem mem(kCap);
  std::thread producer([&] {
    ShmRing prod(mem.p, kCap);
    for (uint64_t k = 0; k < kN; ++k) {
      const std::string r = record(k);
      while (!prod.push(static_cast<uint32_t>(k & 0xffff), r.data(), r.size())) std::this_thread::yield();
    }
  });
  ShmRing cons(mem.p, kCap);
  uint64_t bad = 0;
  for (uint64_t k = 0; k < kN; ++k) {
    uint32_t kind = 0;
    std::string_view v;
    while (!cons.peek(&kind, &v)) std::this_thread::yield();
    if (kind != (k & 0xffff) || v != record(k)) ++bad;
    cons.pop();
  }
  producer.join();
  EXPECT_EQ(bad, 0u) << "records that came out changed or out of order";
  uint32_t kind = 0;
  std::string_view v;
  EXPECT_FALSE(cons.peek(&kind, &v));
}

TEST(ShmRing, BadCapacitiesRecordsAndOverwrittenMemoryAreErrors) {
  RingMem mem(4096);
  for (size_t cap : {size_t{1000}, size_t{6000}, size_t{2048}}) {
    try {
      ShmRing r(mem.p, cap);
      ADD_FAILURE() << "capacity " << cap << " taken";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("capacity " + std::to_string(cap)), std::string::npos) << e.what();
    }
  }
  ShmRing prod(mem.p, 4096), cons(mem.p, 4096);
  const std::string big(prod.max_record() + 1, 'x');
  EXPECT_THROW(prod.push(1, big.data(), big.size()), std::invalid_argument);
  EXPECT_THROW(prod.push(ShmRing::kWrap, "x", 1), std::invalid_argument);
  ASSERT_TRUE(prod.push(1, "hello", 5));
  // The record's length overwritten (another process scribbling on the window): refused, not read past.
  const uint32_t huge = 1u << 20;
  std::memcpy(mem.p + ShmRing::kCtlBytes, &huge, 4);
  uint32_t kind = 0;
  std::string_view v;
  try {
    cons.peek(&kind, &v);
    ADD_FAILURE() << "an overwritten record was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("a record of 1048576 bytes at 0 runs past the ring"), std::string::npos) << e.what();
  }
}

// The counters overwritten: a tail off the 8-byte grid (its header would be read past the ring's end),
// more published than the ring holds, and a wrap marker that jumps past what was published (the
// consumer went round the ring for ever) are refused, naming the counters.
TEST(ShmRing, OverwrittenCountersAreErrorsNotReadsPastTheRingOrEndlessLoops) {
  constexpr size_t cap = 4096;
  auto counters = [](char* p, uint64_t head, uint64_t tail) {
    std::memcpy(p, &head, 8);       // Ctl::head, on the first cache line
    std::memcpy(p + 64, &tail, 8);  // Ctl::tail, on the second
  };
  auto refused = [&](char* p, const std::string& what) {
    ShmRing cons(p, cap);
    uint32_t kind = 0;
    std::string_view v;
    try {
      cons.peek(&kind, &v);
      ADD_FAILURE() << "read: " << what;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  {
    RingMem mem(cap);
    counters(mem.p, cap - 4 + 16, cap - 4);  // the header at 4092 would end 4 bytes past the ring
    refused(mem.p, "head 4108, tail 4092");
  }
  {
    RingMem mem(cap);
    counters(mem.p, cap + 8, 0);
    refused(mem.p, "head 4104, tail 0");
  }
  {
    RingMem mem(cap);
    const uint32_t wrap[2] = {0, ShmRing::kWrap};
    std::memcpy(mem.p + ShmRing::kCtlBytes, wrap, 8);  // a wrap marker at 0: round and round before the fix
    counters(mem.p, 8, 0);
    refused(mem.p, "a wrap marker at 0 runs past the 8 bytes published");
  }
  {  // after a legitimate wrap: still read
    RingMem mem(cap);
    ShmRing prod(mem.p, cap), cons(mem.p, cap);
    const std::string r(1000, 'r');
    uint32_t kind = 0;
    std::string_view v;
    for (int i = 0; i < 12; ++i) {
      ASSERT_TRUE(prod.push(static_cast<uint32_t>(i), r.data(), r.size()));
      ASSERT_TRUE(cons.peek(&kind, &v));
      EXPECT_EQ(kind, static_cast<uint32_t>(i));
      EXPECT_EQ(v, r);
      cons.pop();
    }
  }
}
