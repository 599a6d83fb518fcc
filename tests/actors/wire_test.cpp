// The Values codec (actors/wire.h) and the C++ <-> Value conversions: every kind round-trips, and every
// malformed blob (truncated anywhere, sizes that lie) is refused with ActorError before any allocation.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include <troupe/actors/runtime.h>
#include <troupe/actors/value.h>
#include <troupe/actors/wire.h>
#include <troupe/tensor/backend.h>
#include <troupe/tensor/ops.h>

using namespace troupe;
using namespace troupe::actors;

namespace {

List every_kind() {
  List l;
  l.push_back(Value());
  l.push_back(Value(true));
  l.push_back(Value(int64_t{-1234567890123}));
  l.push_back(Value(3.25));
  l.push_back(Value(std::string("hello\0world", 11)));
  l.push_back(Value(arange(12, TensorOptions().dtype(kFloat32)).reshape({3, 4})));
  l.push_back(Value(full({2, 2}, 7, TensorOptions().dtype(kInt64))));
  l.push_back(Value(zeros({0, 5}, TensorOptions().dtype(kFloat64))));
  l.push_back(Value(Tensor()));
  l.push_back(Value(ones({3}, TensorOptions().dtype(kBool))));
  l.push_back(Value(ones({2, 3}, TensorOptions().dtype(kFloat64)).t()));  // not contiguous
  l.push_back(Value(List{Value(int64_t{1}), Value(List{Value("nested"), Value(2.5)})}));
  return l;
}

std::string encode(const List& l) {
  std::string out;
  wire::encode(l, out, [](const ActorRef&) { return 0u; });
  return out;
}

List decode(const std::string& s) {
  return wire::decode(s.data(), s.size(), [](uint32_t, std::string, int) { return ActorRef(); });
}

void expect_same(const Value& a, const Value& b) {
  ASSERT_EQ(a.get().index(), b.get().index());
  if (a.is<Tensor>()) {
    const Tensor& x = a.as<Tensor>();
    const Tensor& y = b.as<Tensor>();
    ASSERT_EQ(x.defined(), y.defined());
    if (!x.defined()) return;
    EXPECT_EQ(x.dtype(), y.dtype());
    EXPECT_EQ(x.sizes().vec(), y.sizes().vec());
    if (x.numel()) {
      EXPECT_TRUE(equal(x, y));
    }
  } else if (a.is<List>()) {
    ASSERT_EQ(a.as<List>().size(), b.as<List>().size());
    for (size_t i = 0; i < a.as<List>().size(); ++i) expect_same(a.as<List>()[i], b.as<List>()[i]);
  } else if (a.is<std::string>()) {
    EXPECT_EQ(a.as<std::string>(), b.as<std::string>());
  } else if (a.is<int64_t>()) {
    EXPECT_EQ(a.as<int64_t>(), b.as<int64_t>());
  } else if (a.is<double>()) {
    EXPECT_EQ(a.as<double>(), b.as<double>());
  } else if (a.is<bool>()) {
    EXPECT_EQ(a.as<bool>(), b.as<bool>());
  }
}

}  // namespace

TEST(ActorsWire, EveryKindRoundTrips) {
  List l = every_kind();
  List back = decode(encode(l));
  ASSERT_EQ(back.size(), l.size());
  for (size_t i = 0; i < l.size(); ++i) expect_same(l[i], back[i]);
}

TEST(ActorsWire, ATensorIsOneBlobOfItsBytes) {
  Tensor t = zeros({256, 256}, TensorOptions().dtype(kFloat32));
  std::string s = encode({Value(t)});
  // header 8 + tag 1 + dtype 1 + ndim 1 + dims 16 + bytes
  EXPECT_EQ(s.size(), 8u + 1 + 1 + 1 + 16 + t.nbytes());
}

TEST(ActorsWire, EveryTruncationIsRefused) {
  std::string s = encode(every_kind());
  for (size_t n = 0; n < s.size(); ++n) {
    EXPECT_FALSE(wire::fuzz_decode(reinterpret_cast<const uint8_t*>(s.data()), n)) << "prefix of " << n << " bytes";
  }
  EXPECT_TRUE(wire::fuzz_decode(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  std::string trailing = s + "x";
  EXPECT_FALSE(wire::fuzz_decode(reinterpret_cast<const uint8_t*>(trailing.data()), trailing.size()));
}

TEST(ActorsWire, LyingSizesAreRefusedBeforeAllocating) {
  auto expect_refused = [](const std::string& s, const std::string& part) {
    try {
      decode(s);
      ADD_FAILURE() << "accepted";
    } catch (const ActorError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  std::string head = encode({});
  head.resize(4);
  auto u32 = [](uint32_t x) { return std::string(reinterpret_cast<const char*>(&x), 4); };
  auto i64 = [](int64_t x) { return std::string(reinterpret_cast<const char*>(&x), 8); };
  // 4 billion values claimed in a few bytes.
  expect_refused(head + u32(0xffffffffu) + std::string(4, '\0'), "truncated");
  // A string of 2^62 bytes.
  expect_refused(head + u32(1) + std::string(1, '\4') + i64(int64_t{1} << 62), "truncated");
  // A tensor whose shape overflows, and one that claims more bytes than remain.
  expect_refused(head + u32(1) + std::string("\5\6\2", 3) + i64(int64_t{1} << 40) + i64(int64_t{1} << 40), "claims more bytes");
  expect_refused(head + u32(1) + std::string("\5\6\1", 3) + i64(1000) + std::string(16, '\0'), "claims more bytes");
  expect_refused(head + u32(1) + std::string("\5\6\1", 3) + i64(-1), "dimension of -1");
  expect_refused(head + u32(1) + std::string("\5\x77", 2), "unknown dtype");
  expect_refused(head + u32(1) + std::string("\x09", 1), "unknown value tag 9");
  expect_refused(head + u32(1) + std::string("\7", 1) + u32(0x7fffffff), "truncated");
  std::string deep = head + u32(1);
  for (int i = 0; i < 40; ++i) deep += std::string("\7", 1) + u32(1);
  expect_refused(deep, "nest deeper than 32");
  expect_refused(std::string("XXXX") + u32(0), "bad magic");
}

// A tensor off the CPU carries its device (dtype | 0x80, then type and index) and is decoded onto a GPU of
// the receiving process: the arrival device when set, else the same index (too high an index is refused,
// naming it). A process without CUDA takes it on the CPU.
TEST(ActorsWire, ACudaTensorArrivesOnAGpuOrOnTheCpuOfAProcessWithoutOne) {
  auto refusal = [](const std::string& s) -> std::string {
    try {
      decode(s);
    } catch (const ActorError& e) {
      return e.what();
    }
    return "";
  };
  std::string head = encode({});
  head.resize(4);
  auto u32 = [](uint32_t x) { return std::string(reinterpret_cast<const char*>(&x), 4); };
  auto i64 = [](int64_t x) { return std::string(reinterpret_cast<const char*>(&x), 8); };
  const float vals[2] = {1.5f, -2.0f};
  const std::string bytes(reinterpret_cast<const char*>(vals), sizeof vals);
  auto on = [&](uint8_t type, uint8_t index) {
    const char dt = static_cast<char>(static_cast<uint8_t>(kFloat32) | 0x80);
    return head + u32(1) + std::string("\5", 1) + std::string(1, dt) + std::string(1, static_cast<char>(type)) +
           std::string(1, static_cast<char>(index)) + std::string("\1", 1) + i64(2) + bytes;
  };
  const int gpus = cuda::is_available() ? cuda::device_count() : 0;
  if (gpus == 0) {
    // a process without CUDA takes it on the CPU (all it can compute on), whatever the arrival device
    for (int home : {-1, 0}) {
      set_cuda_arrival_device(home);
      List back = decode(on(1, 3));
      set_cuda_arrival_device(-1);
      ASSERT_EQ(back.size(), 1u);
      EXPECT_TRUE(back[0].as<Tensor>().is_cpu());
      EXPECT_TRUE(equal(back[0].as<Tensor>(), from_blob(const_cast<float*>(vals), {2}).clone()));
    }
  } else {
    List back = decode(on(1, 0));
    ASSERT_EQ(back.size(), 1u);
    const Tensor& t = back[0].as<Tensor>();
    EXPECT_TRUE(t.is_cuda());
    EXPECT_EQ(t.device().index, 0);
    EXPECT_TRUE(equal(t.cpu(), from_blob(const_cast<float*>(vals), {2}).clone()));
    const std::string e = refusal(on(1, static_cast<uint8_t>(gpus)));
    EXPECT_NE(e.find("a tensor sent from cuda:" + std::to_string(gpus) + " was to arrive on cuda:" + std::to_string(gpus) +
                     " in a process that has " + std::to_string(gpus) + " CUDA device(s)"),
              std::string::npos)
        << e;
    // With an arrival device set (launch: the rank's own GPU), a tensor from any GPU of the peer lands there.
    set_cuda_arrival_device(0);
    List mapped = decode(on(1, 200));
    set_cuda_arrival_device(-1);
    EXPECT_TRUE(mapped[0].as<Tensor>().is_cuda());
    EXPECT_EQ(mapped[0].as<Tensor>().device().index, 0);
  }
  EXPECT_THROW(set_cuda_arrival_device(-2), std::invalid_argument);
  EXPECT_EQ(cuda_arrival_device(), -1);
  const std::string bad = refusal(on(7, 0));
  EXPECT_NE(bad.find("unknown device type code 7"), std::string::npos) << bad;
  // The device bytes are counted like every other: each prefix is refused as truncated.
  const std::string whole = on(1, 0);
  for (size_t n = 9; n < whole.size(); ++n) EXPECT_NE(refusal(whole.substr(0, n)).find("truncated"), std::string::npos) << n;
  // A CPU tensor has no device bytes (its dtype code as before).
  const std::string cpu = encode({Value(ones({2}))});
  EXPECT_EQ(static_cast<uint8_t>(cpu[9]), static_cast<uint8_t>(kFloat32));
}

// A CUDA tensor (contiguous or not) leaves as its bytes and comes back on the same device, equal.
TEST(ActorsWireCuda, ACudaTensorRoundTripsOntoItsDevice) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Device gpu(kCUDA, cuda::device_count() - 1);
  Tensor a = arange(12, TensorOptions().dtype(kFloat64)).reshape({3, 4}).to(gpu);
  Tensor b = a.t();  // not contiguous
  List back = decode(encode({Value(a), Value(b), Value(List{Value(a)})}));
  ASSERT_EQ(back.size(), 3u);
  for (const Tensor& t : {back[0].as<Tensor>(), back[1].as<Tensor>(), back[2].as<List>()[0].as<Tensor>()}) {
    EXPECT_TRUE(t.is_cuda());
    EXPECT_EQ(t.device().index, gpu.index);
  }
  EXPECT_TRUE(equal(back[0].as<Tensor>().cpu(), a.cpu()));
  EXPECT_TRUE(equal(back[1].as<Tensor>().cpu(), b.cpu()));
}

TEST(ActorsWire, FuzzEntryNeverCrashesOnRandomBytes) {
  std::string s = encode(every_kind());
  uint64_t x = 88172645463325252ull;
  for (int round = 0; round < 2000; ++round) {
    std::string m = s;
    for (int k = 0; k < 4; ++k) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      m[x % m.size()] = static_cast<char>(x >> 24);
    }
    wire::fuzz_decode(reinterpret_cast<const uint8_t*>(m.data()), m.size());
  }
}

TEST(ActorsValue, TraitsConvertBothWays) {
  EXPECT_EQ(from_value<int>(to_value(5)), 5);
  EXPECT_EQ(from_value<double>(to_value(5)), 5.0);  // an int reads as a float
  EXPECT_EQ(from_value<std::string>(to_value("s")), "s");
  std::vector<int64_t> v{1, 2, 3};
  EXPECT_EQ(from_value<std::vector<int64_t>>(to_value(v)), v);
  std::map<std::string, double> m{{"a", 1.5}, {"b", 2.5}};
  EXPECT_EQ((from_value<std::map<std::string, double>>(to_value(m))), m);
  auto p = from_value<std::pair<std::string, int64_t>>(to_value(std::pair<std::string, int64_t>{"k", 9}));
  EXPECT_EQ(p.first, "k");
  EXPECT_EQ(p.second, 9);
  try {
    from_value<Tensor>(to_value(1.5));
    ADD_FAILURE();
  } catch (const ActorError& e) {
    EXPECT_STREQ(e.what(), "expected Tensor, got float");
  }
}

// The lane's head (wire.h LaneHead): every field round-trips, the seq slot is where senders patch it,
// every truncation and a lying body count or string length is refused, and the fuzz entry takes heads.
TEST(ActorsWire, LaneHeadsRoundTripAndRefuseWhatLies) {
  wire::LaneHead h;
  h.kind = wire::LaneHead::kReply;
  h.seq = 77;
  h.id = (uint64_t{1} << 40) + 5;
  h.target = 123;
  h.from_rank = 2;
  h.ok = false;
  h.text = "the handler threw: no";
  h.bodies = {4096, 0, uint64_t{1} << 26};
  std::string head;
  wire::encode_lane_head(h, head);
  const size_t fields = head.size();
  wire::encode(List{Value(int64_t{3})}, head, [](const ActorRef&) -> uint32_t { return 0; });
  uint64_t seq = 0;
  std::memcpy(&seq, head.data() + wire::kLaneSeqOffset, sizeof seq);
  EXPECT_EQ(seq, 77u);
  wire::LaneHead back = wire::decode_lane_head(head.data(), head.size());
  EXPECT_EQ(back.kind, h.kind);
  EXPECT_EQ(back.seq, h.seq);
  EXPECT_EQ(back.id, h.id);
  EXPECT_EQ(back.target, h.target);
  EXPECT_EQ(back.from_rank, 2);
  EXPECT_FALSE(back.ok);
  EXPECT_EQ(back.text, h.text);
  EXPECT_EQ(back.bodies, h.bodies);
  EXPECT_EQ(back.blob_offset, fields);
  List vals = wire::decode(head.data() + back.blob_offset, head.size() - back.blob_offset, nullptr);
  ASSERT_EQ(vals.size(), 1u);
  EXPECT_EQ(vals[0].as<int64_t>(), 3);
  for (size_t n = 0; n < fields; ++n) {
    EXPECT_THROW(wire::decode_lane_head(head.data(), n), ActorError) << n;
  }
  // A body count of 2^32-1 with no sizes behind it, a text claiming 2^60 bytes, an unknown kind.
  std::string lying = head.substr(0, fields);
  const size_t count_at = fields - 4 - 3 * 8;
  uint32_t huge = 0xffffffffu;
  std::memcpy(lying.data() + count_at, &huge, 4);
  EXPECT_THROW(wire::decode_lane_head(lying.data(), lying.size()), ActorError);
  lying = head.substr(0, fields);
  const uint64_t big = uint64_t{1} << 60;
  std::memcpy(lying.data() + 4 + 1 + 8 + 8 + 8 + 4 + 1, &big, 8);
  std::string e;
  try {
    wire::decode_lane_head(lying.data(), lying.size());
  } catch (const ActorError& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("the error text"), std::string::npos) << e;
  lying = head;
  lying[4] = 9;
  EXPECT_THROW(wire::decode_lane_head(lying.data(), lying.size()), ActorError);
  EXPECT_TRUE(wire::fuzz_decode(reinterpret_cast<const uint8_t*>(head.data()), head.size()));
  EXPECT_FALSE(wire::fuzz_decode(reinterpret_cast<const uint8_t*>(lying.data()), lying.size()));
}
