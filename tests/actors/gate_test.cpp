// The gate in front of BASP (actors/auth.h, internal/gate.h), in one process: an actor system listening
// on loopback (start_connected over a world of one) refuses raw TCP clients that send garbage, a BASP
// header claiming 2 GiB, or prove a wrong secret; nothing of theirs runs, and it still serves.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include <troupe/actors/auth.h>
#include <troupe/comm/local.h>

#include "actors_helpers.h"

using namespace troupe;
using namespace troupe::actors;
using namespace troupe::actors::testing;

namespace {

int connect_to(const std::string& endpoint) {
  auto colon = endpoint.rfind(':');
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(endpoint.substr(colon + 1))));
  inet_pton(AF_INET, endpoint.substr(0, colon).c_str(), &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Reads until the peer closes; returns the bytes read, or -1 when it did not close within the timeout.
long drain(int fd) {
  long total = 0;
  char buf[4096];
  for (;;) {
    ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r == 0) return total;
    if (r < 0) return -1;
    total += r;
  }
}

long rss_kb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return 0;
}

struct Listening {
  std::shared_ptr<Runtime> rt;
  Listening() {
    register_test_actors();
    setenv("TROUPE_SECRET", "gate-test-secret", 1);
    rt = start_connected(comm::make_local_groups(1).at(0));
  }
  ~Listening() {
    rt.reset();
    actors::stop();
    unsetenv("TROUPE_SECRET");
  }
};

}  // namespace

TEST(ActorsGate, RefusesGarbageAWrongSecretAndALyingBaspHeader) {
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) GTEST_SKIP() << "single-process test";
  Listening l;
  const std::string ep = l.rt->endpoint(0);
  ASSERT_EQ(ep.rfind("127.0.0.1:", 0), 0u) << ep;
  ActorRef c = l.rt->spawn_on(0, "guarded", "Counter", 0);

  // Garbage: the listener sends its 40-byte challenge, reads 72 bytes, and closes.
  int fd = connect_to(ep);
  ASSERT_GE(fd, 0);
  std::string junk(72, 'x');
  ASSERT_EQ(::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL), 72);
  EXPECT_EQ(drain(fd), static_cast<long>(auth::kChallengeSize));
  ::close(fd);

  // A BASP header claiming a 2 GiB payload, sent at once: nothing is allocated for it.
  const long rss0 = rss_kb();
  fd = connect_to(ep);
  ASSERT_GE(fd, 0);
  std::string basp(72, '\0');
  basp[0] = 1;                                                       // message type
  basp[4] = '\x7f', basp[5] = basp[6] = basp[7] = '\xff';            // payload_len 0x7fffffff
  ASSERT_EQ(::send(fd, basp.data(), basp.size(), MSG_NOSIGNAL), 72);
  EXPECT_EQ(drain(fd), static_cast<long>(auth::kChallengeSize));
  ::close(fd);
  EXPECT_LT(rss_kb() - rss0, 64 * 1024) << "RSS grew by " << (rss_kb() - rss0) << " kB";

  // The handshake with a wrong secret fails on both sides.
  fd = connect_to(ep);
  ASSERT_GE(fd, 0);
  EXPECT_FALSE(auth::prove_to_listener(fd, auth::random_secret(), std::chrono::seconds(5)));
  ::close(fd);

  // A client that connects and leaves.
  fd = connect_to(ep);
  ASSERT_GE(fd, 0);
  ::close(fd);

  // The right secret passes, and BASP speaks (its server handshake) only then.
  fd = connect_to(ep);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(auth::prove_to_listener(fd, auth::secret_from_env(), std::chrono::seconds(5)));
  char basp_hello[32];
  EXPECT_EQ(::recv(fd, basp_hello, sizeof basp_hello, MSG_WAITALL), 32);
  ::close(fd);

  // Nothing of theirs ran; the system still serves.
  EXPECT_EQ(c.request<int64_t>("add", 2).get(), 2);
  EXPECT_EQ(l.rt->service(0).request<int64_t>("ping").get(), 0);
  for (int i = 0; i < 100 && l.rt->gate_counts().first < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto [refused, admitted] = l.rt->gate_counts();
  EXPECT_EQ(refused, 4);
  EXPECT_EQ(admitted, 1);
}

TEST(ActorsGate, HandshakeChecksBothSides) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  const std::string secret = auth::random_secret();
  bool listener_ok = false;
  std::thread t([&] { listener_ok = auth::accept_peer(sv[0], secret, std::chrono::seconds(5)); });
  EXPECT_TRUE(auth::prove_to_listener(sv[1], secret, std::chrono::seconds(5)));
  t.join();
  EXPECT_TRUE(listener_ok);
  ::close(sv[0]);
  ::close(sv[1]);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::thread t2([&] {
    listener_ok = auth::accept_peer(sv[0], secret, std::chrono::seconds(5));
    ::close(sv[0]);
  });
  EXPECT_FALSE(auth::prove_to_listener(sv[1], auth::random_secret(), std::chrono::seconds(5)));
  t2.join();
  EXPECT_FALSE(listener_ok);
  ::close(sv[1]);
}
