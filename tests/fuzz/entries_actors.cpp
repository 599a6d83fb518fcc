// Fuzz entry points over what other processes send: actor messages, the connection handshake.
#include "fuzz_common.h"

#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <troupe/actors/auth.h>
#include <troupe/actors/wire.h>
#include <troupe/comm/shm_ring.h>
#include <troupe/tensor/ops.h>

namespace troupe::fuzz {
namespace {

// ---- the actors' wire format (actors/wire.h)
bool run_wire(const uint8_t* data, size_t size) {
  bool ok = false;
  guarded([&] { ok = actors::wire::fuzz_decode(data, size); });
  return ok;
}
Seeds seeds_wire() {
  using actors::List;
  using actors::Value;
  List nested;
  nested.push_back(Value(int64_t{-3}));
  nested.push_back(Value(std::string("name")));
  List values;
  values.push_back(Value());
  values.push_back(Value(true));
  values.push_back(Value(int64_t{42}));
  values.push_back(Value(2.5));
  values.push_back(Value(std::string("forward")));
  values.push_back(Value(arange(6, TensorOptions().dtype(kFloat32)).reshape({2, 3})));
  values.push_back(Value(Tensor()));
  values.push_back(Value(nested));
  std::string ok;
  actors::wire::encode(values, ok, [](const actors::ActorRef&) { return 0u; });
  std::string huge_count = ok;
  huge_count[4] = huge_count[5] = huge_count[6] = huge_count[7] = '\xff';
  // a float32 tensor of 2 elements sent from cuda:0 (dtype | 0x80, device type 1, index 0): decoded onto the
  // GPU where there is one, onto the CPU elsewhere; and one of an unknown device type
  auto on_device = [](char type) {
    std::string b("TRA1\1\0\0\0\5", 9);
    b += static_cast<char>(static_cast<uint8_t>(kFloat32) | 0x80);
    b += type;
    b += std::string("\0\1", 2);
    const int64_t n = 2;
    b.append(reinterpret_cast<const char*>(&n), sizeof n);
    return b + std::string(8, '\0');
  };
  return {{"ok-every-kind", ok},       {"bad-truncated", ok.substr(0, ok.size() - 3)}, {"bad-count", huge_count},
          {"bad-trailing", ok + "x"}, {"ok-cuda-tensor", on_device('\1')},               {"bad-unknown-device", on_device('\7')}};
}

// ---- the lane's shared-memory ring (comm/shm_ring.h), which another process of the node writes: `data`
// is its two counters (head, then tail: 8 bytes each) and then its 4 KB of records (zeros after the end),
// read by the consumer until it is empty or refuses.
constexpr size_t kRingCap = 4096;
struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
bool run_lane_ring(const uint8_t* data, size_t size) {
  std::unique_ptr<char, FreeDeleter> mem(static_cast<char*>(std::aligned_alloc(64, comm::ShmRing::bytes(kRingCap))));
  comm::ShmRing::init(mem.get(), kRingCap);
  uint64_t head = 0, tail = 0;
  std::memcpy(&head, data, std::min<size_t>(size, 8));
  if (size > 8) std::memcpy(&tail, data + 8, std::min<size_t>(size - 8, 8));
  std::memcpy(mem.get(), &head, 8);       // the counters' places in the ring's control block
  std::memcpy(mem.get() + 64, &tail, 8);
  if (size > 16) std::memcpy(mem.get() + comm::ShmRing::kCtlBytes, data + 16, std::min(size - 16, kRingCap));
  bool ok = false;
  guarded([&] {
    comm::ShmRing ring(mem.get(), kRingCap);
    uint32_t kind = 0;
    std::string_view rec;
    uint64_t bytes = 0;
    while (ring.peek(&kind, &rec)) {
      for (char c : rec) bytes += static_cast<unsigned char>(c);  // every byte handed out is read
      ring.pop();
    }
    ok = bytes != ~uint64_t{0};
  });
  return ok;
}
/// A ring's counters and records as run_lane_ring takes them.
std::string ring_image(const char* mem) {
  std::string s(16 + kRingCap, '\0');
  std::memcpy(s.data(), mem, 8);
  std::memcpy(s.data() + 8, mem + 64, 8);
  std::memcpy(s.data() + 16, mem + comm::ShmRing::kCtlBytes, kRingCap);
  return s;
}
Seeds seeds_lane_ring() {
  std::unique_ptr<char, FreeDeleter> mem(static_cast<char*>(std::aligned_alloc(64, comm::ShmRing::bytes(kRingCap))));
  comm::ShmRing::init(mem.get(), kRingCap);
  comm::ShmRing prod(mem.get(), kRingCap), cons(mem.get(), kRingCap);
  const std::string r(1000, 'r');
  uint32_t kind = 0;
  std::string_view v;
  for (uint32_t i = 0; i < 4; ++i) {  // 4 records in and out: the next ones wrap
    prod.push(i, r.data(), r.size());
    cons.peek(&kind, &v);
    cons.pop();
  }
  prod.push(7, "head", 4);
  prod.push(8, r.data(), r.size());  // after a wrap marker at 4048
  prod.push(9, "", 0);
  const std::string ok = ring_image(mem.get());
  std::string off_grid = ok, too_much = ok, overlong = ok, wrap_past = ok;
  const uint64_t tail4 = 4 * 1008 + 4, head_far = 4 * 1008 + kRingCap + 8;
  std::memcpy(off_grid.data() + 8, &tail4, 8);
  std::memcpy(too_much.data(), &head_far, 8);
  const uint32_t huge = 5000;
  std::memcpy(overlong.data() + 16 + 4 * 1008, &huge, 4);  // the record "head"'s length
  const uint64_t h8 = 8, t0 = 0;
  const uint32_t wrap[2] = {0, comm::ShmRing::kWrap};
  std::memcpy(wrap_past.data(), &h8, 8);
  std::memcpy(wrap_past.data() + 8, &t0, 8);
  std::memcpy(wrap_past.data() + 16, wrap, 8);
  return {{"ok-records-across-the-wrap", ok}, {"bad-tail-off-grid", off_grid}, {"bad-more-than-capacity", too_much},
          {"bad-record-past-the-ring", overlong}, {"bad-wrap-past-published", wrap_past}};
}

// ---- the actor systems' connection handshake (actors/auth.h), over a socket pair: `data` is what the
// other side sends, then it closes its writing half.
const std::string kSecret(32, '\x5a');

template <class Side>
bool handshake(const uint8_t* data, size_t size, Side side) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return false;
  size_t sent = 0;
  while (sent < size) {  // a socket pair buffers far more than a handshake's 72 bytes; cap what is sent
    const ssize_t n = ::send(fds[1], data + sent, std::min<size_t>(size - sent, 65536), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fds[1], SHUT_WR);
  bool ok = false;
  guarded([&] { ok = side(fds[0]); });
  ::close(fds[0]);
  ::close(fds[1]);
  return ok;
}
bool run_auth_listener(const uint8_t* data, size_t size) {
  return handshake(data, size, [](int fd) {
    return actors::auth::accept_peer(fd, kSecret, std::chrono::milliseconds(200));
  });
}
bool run_auth_peer(const uint8_t* data, size_t size) {
  return handshake(data, size, [](int fd) {
    return actors::auth::prove_to_listener(fd, kSecret, std::chrono::milliseconds(200));
  });
}
Seeds seeds_auth() {
  // the nonces are random on each run, so no recorded input can pass: every seed must be refused
  std::string response = "TRPAUTH1" + std::string(64, '\x11');
  return {{"bad-response-size", response}, {"bad-magic", "TRPAUTH2" + std::string(64, '\x11')},
          {"bad-short", "TRPAUTH1"}, {"bad-empty", ""}};
}

}  // namespace

std::vector<Entry> actors_entries() {
  return {
      {"wire", "actor messages (actors::wire::decode)", run_wire, seeds_wire},
      {"auth_listener", "a peer's handshake response (actors::auth::accept_peer)", run_auth_listener, seeds_auth},
      {"auth_peer", "a listener's challenge and proof (actors::auth::prove_to_listener)", run_auth_peer, seeds_auth},
      {"lane_ring", "the lane's shared-memory ring of records from another process (comm::ShmRing::peek)", run_lane_ring,
       seeds_lane_ring},
  };
}

}  // namespace troupe::fuzz
