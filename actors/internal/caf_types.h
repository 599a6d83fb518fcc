// Private (includes CAF): the two message types every actor exchanges (Call, Reply), the Values they
// carry (Payload: one blob on the wire, see wire.h) and ActorRef's implementation. Only actors/*.cpp
// include it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <caf/all.hpp>

#include <troupe/actors/value.h>
#include <troupe/comm/process_group.h>

namespace troupe::actors::detail {

using tr_tick_atom = caf::atom_constant<caf::atom("tr_tick")>;
using tr_mon_atom = caf::atom_constant<caf::atom("tr_mon")>;
using tr_drain_atom = caf::atom_constant<caf::atom("tr_drain")>;

struct Host;

/// What an ActorRef holds.
struct RefImpl {
  caf::actor handle;
  std::string name;
  int rank = -1;
  /// The actor's mailbox when it lives in this process (same-process messages skip CAF's mailbox).
  std::weak_ptr<Host> local;
};
/// An ActorRef on `h` (with its mailbox when `h` lives in this process).
ActorRef make_ref(caf::actor h, std::string name, int rank);

/// Values of a message. In one process they pass as they are (tensors by handle); across processes as
/// one blob (wire.h) plus the list of actor handles its ActorRefs use, which CAF serialises itself.
struct Payload {
  /// What only a message between processes needs (kept out of line: a local message stays small).
  struct Extra {
    /// Set by the decoder when the blob was malformed (the receiver reports it instead of running).
    std::string decode_error;
    /// Sender side: the ids under which the tensors of at least the data plane's threshold were sent on
    /// it, in the order the encoder meets them (not on the wire as such).
    std::vector<int64_t> dp_ids;
    size_t dp_next = 0;
    /// Receiver side: the data-plane receives of its tensors, to wait for before the values are used.
    std::vector<comm::WorkPtr> dp_in;
  };
  List values;
  std::shared_ptr<Extra> extra;

  /// The Extra, made on first use.
  Extra& ext() {
    if (!extra) extra = std::make_shared<Extra>();
    return *extra;
  }
  /// The decoder's complaint, or "".
  std::string decode_error() const { return extra ? extra->decode_error : std::string(); }
  /// True when tensors of it are still arriving on the data plane.
  bool awaits_data_plane() const { return extra && !extra->dp_in.empty(); }
};

/// Large tensors between processes: point to point on a group of every rank of its own, matched by id.
struct DataPlane {
  comm::ProcessGroupPtr group;
  int rank = -1;
  /// Tensors of at least this many bytes travel on it (TROUPE_ACTOR_DATA_PLANE_BYTES; set_data_plane_bytes).
  std::atomic<int64_t> threshold{0};
};
/// This process's data plane, or null (one process, or none connected).
const DataPlane* data_plane();
/// True when `t` goes on the data plane: a CPU tensor (another's bytes travel inside the message, to be
/// moved to its device once decoded; the data plane's receive completes after the decoder returns).
inline bool on_data_plane(const DataPlane& dp, const Tensor& t) {
  return t.defined() && t.is_cpu() && static_cast<int64_t>(t.nbytes()) >= dp.threshold.load(std::memory_order_relaxed);
}
/// Sends the tensors of `values` that go on the data plane to `peer`, recording their ids in `p`.
void send_data_plane(Payload& p, int peer);
/// Waits for the data-plane tensors of `p` (at most `timeout`); "" or what went wrong.
std::string await_data_plane(Payload& p, std::chrono::milliseconds timeout);

/// A request (id > 0: the sender waits for a Reply with this id) or a one-way message (id 0).
struct Call {
  uint64_t id = 0;
  std::string method;
  Payload args;
  /// The sender's rank (its process's, across processes; -1 with --ranks N).
  int32_t from_rank = -1;
};

/// The answer to a Call: ok with one value, or an error text.
struct Reply {
  uint64_t id = 0;
  bool ok = true;
  std::string error;
  Payload result;
};

/// A Call that crosses to another process by CAF while the lane (system.cpp) is on: sent to that
/// process's router with its place in the sender's sequence to that process, so that it is delivered in
/// order with the Calls that took the lane (those whose values hold an ActorRef go this way).
struct Routed {
  uint64_t seq = 0;
  uint64_t target = 0;  // the actor's id in the receiving process
  Call call;
};

/// Encodes x into the serializer (payload.cpp).
caf::error save_payload(caf::serializer& f, Payload& x);
/// Decodes x from the deserializer, checking the blob's claimed size against the bytes that remain.
caf::error load_payload(caf::deserializer& f, Payload& x);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Payload& x) {
  if constexpr (std::is_base_of_v<caf::serializer, Inspector>) {
    return save_payload(f, x);
  } else if constexpr (std::is_base_of_v<caf::deserializer, Inspector>) {
    return load_payload(f, x);
  } else {
    std::string summary = "<" + std::to_string(x.values.size()) + " values>";
    return f(summary);
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Call& x) {
  return f(caf::meta::type_name("troupe_call"), x.id, x.method, x.args, x.from_rank);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Reply& x) {
  return f(caf::meta::type_name("troupe_reply"), x.id, x.ok, x.error, x.result);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Routed& x) {
  return f(caf::meta::type_name("troupe_routed"), x.seq, x.target, x.call);
}

}  // namespace troupe::actors::detail
