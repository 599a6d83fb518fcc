// The gate (internal/gate.h): a CAF middleman actor (as libcaf-openssl makes its own) whose open() makes
// an authenticating doorman and whose connect() proves the secret before handing the socket to BASP.
// The doorman hands each accepted socket to a short-lived thread that runs the handshake (auth.h) with a
// timeout; only a socket that passed reaches BASP, on the multiplexer's thread.
#include <unistd.h>

#include <thread>

#include <caf/io/all.hpp>
#include <caf/io/middleman_actor_impl.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/io/network/doorman_impl.hpp>

#include <troupe/actors/auth.h>
#include <troupe/actors/internal/gate.h>
#include <troupe/actors/value.h>

namespace troupe::actors::detail {
namespace {

constexpr auto kHandshakeTimeout = std::chrono::seconds(5);
constexpr int kMaxInflight = 64;  // handshakes at once; more connections are closed at once

namespace net = caf::io::network;

class AuthDoorman : public net::doorman_impl {
 public:
  AuthDoorman(net::default_multiplexer& mx, net::native_socket fd, std::string secret, std::shared_ptr<GateState> st)
      : net::doorman_impl(mx, fd), secret_(std::move(secret)), st_(std::move(st)) {}

  bool new_connection() override {
    if (detached()) return false;
    const net::native_socket fd = acceptor_.accepted_socket();
    {
      std::lock_guard<std::mutex> g(st_->mu);
      if (!st_->open || st_->inflight >= kMaxInflight) {
        ++st_->refused;
        ::close(fd);
        return true;
      }
      ++st_->inflight;
    }
    caf::intrusive_ptr<AuthDoorman> self{this};
    std::thread([self, fd]() mutable { verify(std::move(self), fd); }).detach();
    return true;
  }

 private:
  // On its own thread: the handshake, then (under the gate's lock, so stop() cannot pass in between) the
  // socket goes to the multiplexer's thread or is closed. The thread keeps no reference past the lock.
  static void verify(caf::intrusive_ptr<AuthDoorman> self, net::native_socket fd) {
    std::shared_ptr<GateState> st = self->st_;
    const bool ok = auth::accept_peer(fd, self->secret_, kHandshakeTimeout);
    std::lock_guard<std::mutex> g(st->mu);
    if (ok && st->open) {
      ++st->admitted;
      auto& mx = self->acceptor_.backend();
      mx.post([self = std::move(self), fd] { self->admit(fd); });
    } else {
      ++st->refused;
      ::close(fd);
      self.reset();
    }
    --st->inflight;
    st->cv.notify_all();
  }

  // On the multiplexer's thread: as doorman_impl::new_connection does with a fresh socket.
  void admit(net::native_socket fd) {
    if (detached() || !parent()) {
      ::close(fd);
      return;
    }
    net::tcp_nodelay(fd, true);
    auto& mx = acceptor_.backend();
    auto sptr = mx.new_scribe(fd);
    auto hdl = sptr->hdl();
    parent()->add_scribe(std::move(sptr));
    doorman::new_connection(&mx, hdl);
  }

  std::string secret_;
  std::shared_ptr<GateState> st_;
};

class GateActor : public caf::io::middleman_actor_impl {
 public:
  GateActor(caf::actor_config& cfg, caf::actor broker, std::string secret, std::shared_ptr<GateState> st)
      : middleman_actor_impl(cfg, std::move(broker)), secret_(std::move(secret)), st_(std::move(st)) {}

  const char* name() const override { return "troupe_gate"; }

 protected:
  caf::expected<caf::io::scribe_ptr> connect(const std::string& host, uint16_t port) override {
    auto fd = net::new_tcp_connection(host, port);
    if (!fd) return fd.error();
    if (!auth::prove_to_listener(*fd, secret_, kHandshakeTimeout)) {
      ::close(*fd);
      return caf::make_error(caf::sec::cannot_connect_to_node,
                             "troupe: " + host + ":" + std::to_string(port) +
                                 " did not complete the authentication (another job's secret, or not a troupe rank)");
    }
    net::tcp_nodelay(*fd, true);
    return system().middleman().backend().new_scribe(*fd);
  }

  caf::expected<caf::io::doorman_ptr> open(uint16_t port, const char* addr, bool reuse) override {
    auto fd = net::new_tcp_acceptor_impl(port, addr, reuse);
    if (!fd) return fd.error();
    auto& mx = static_cast<net::default_multiplexer&>(system().middleman().backend());
    return caf::make_counted<AuthDoorman>(mx, *fd, secret_, st_);
  }

 private:
  std::string secret_;
  std::shared_ptr<GateState> st_;
};

}  // namespace

Gate spawn_gate(caf::actor_system& sys, const std::string& secret) {
  Gate g;
  g.state = std::make_shared<GateState>();
  auto basp = sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
  // Detached: connect() blocks for the handshake.
  auto mm = sys.spawn<GateActor, caf::detached + caf::hidden>(basp, secret, g.state);
  g.mm = caf::actor_cast<caf::actor>(mm);
  return g;
}

uint16_t gate_publish(caf::actor_system& sys, const Gate& gate, const caf::actor& whom, const char* bind_addr) {
  caf::scoped_actor self{sys};
  uint16_t port = 0;
  std::string err;
  self->request(gate.mm, std::chrono::seconds(30), caf::publish_atom::value, uint16_t{0},
                caf::actor_cast<caf::strong_actor_ptr>(whom), std::set<std::string>{},
                std::string(bind_addr ? bind_addr : ""), false)
      .receive([&](uint16_t p) { port = p; }, [&](caf::error& e) { err = sys.render(e); });
  if (!err.empty()) throw ActorError("[actors] could not listen: " + err);
  return port;
}

caf::actor gate_connect(caf::actor_system& sys, const Gate& gate, const std::string& host, uint16_t port) {
  caf::scoped_actor self{sys};
  caf::actor out;
  std::string err;
  self->request(gate.mm, std::chrono::seconds(30), caf::connect_atom::value, host, port)
      .receive(
          [&](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
            if (ptr) out = caf::actor_cast<caf::actor>(std::move(ptr));
            else err = "no actor is published there";
          },
          [&](caf::error& e) { err = sys.render(e); });
  if (!err.empty()) throw ActorError(err);
  return out;
}

void gate_close(const Gate& gate) {
  if (!gate.state) return;
  std::unique_lock<std::mutex> g(gate.state->mu);
  gate.state->open = false;
  gate.state->cv.wait(g, [&] { return gate.state->inflight == 0; });
}

}  // namespace troupe::actors::detail
