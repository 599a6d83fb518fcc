// Fuzz entry points over what other processes send: actor messages, the connection handshake.
#include "fuzz_common.h"

#include <sys/socket.h>

#include <algorithm>
#include <chrono>

#include <troupe/actors/auth.h>
#include <troupe/actors/wire.h>
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
  return {{"ok-every-kind", ok}, {"bad-truncated", ok.substr(0, ok.size() - 3)}, {"bad-count", huge_count},
          {"bad-trailing", ok + "x"}};
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
  };
}

}  // namespace troupe::fuzz
