// Private (includes CAF): the gate, through which this process's actor system listens and connects:
// a middleman actor whose listener admits a connection to BASP only once it passed the handshake of
// auth.h, and whose connections prove the secret before BASP speaks (gate.cpp).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <caf/all.hpp>

namespace troupe::actors::detail {

/// What the gate's handshake threads share with stop(): no connection is admitted once closed.
struct GateState {
  std::mutex mu;
  std::condition_variable cv;
  bool open = true;
  int inflight = 0;
  /// Connections refused so far (a wrong secret, garbage, a timeout).
  int64_t refused = 0;
  /// Connections admitted to BASP so far.
  int64_t admitted = 0;
};

/// The gate of one actor system.
struct Gate {
  caf::actor mm;
  std::shared_ptr<GateState> state;
};

/// Spawns the gate of `sys` for `secret`.
Gate spawn_gate(caf::actor_system& sys, const std::string& secret);
/// Listens for `whom` on an ephemeral port of `bind_addr` (null: every interface); returns the port.
/// Throws ActorError.
uint16_t gate_publish(caf::actor_system& sys, const Gate& gate, const caf::actor& whom, const char* bind_addr);
/// Connects (authenticated) to the actor published at host:port. Throws ActorError.
caf::actor gate_connect(caf::actor_system& sys, const Gate& gate, const std::string& host, uint16_t port);
/// Admits nothing more and waits for the handshakes in flight (each bounded by its timeout).
void gate_close(const Gate& gate);

}  // namespace troupe::actors::detail
