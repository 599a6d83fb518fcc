// The rank service: one actor per rank that spawns actors there from the factory registry and keeps the
// rank's part of the directory (its named actors). Runtime::spawn_on / lookup / names talk to it.
#include <algorithm>
#include <map>

#include <troupe/actors/internal/services.h>

namespace troupe::actors::detail {
namespace {

class RankService : public Actor {
 public:
  explicit RankService(int rank) : rank_(rank) {
    handle("spawn", [this](std::string name, std::string factory, List args) {
      return spawn(std::move(name), factory, args);
    });
    handle("lookup", [this](std::string name) -> Value {
      auto it = names_.find(name);
      return it == names_.end() ? Value() : Value(it->second);
    });
    handle("names", [this] {
      std::vector<std::string> out;
      for (const auto& [k, v] : names_) out.push_back(k);
      return out;
    });
    handle("hello", [](int64_t rank, ActorRef service) { set_service(static_cast<int>(rank), service); });
    handle("forget", [this](std::string name) { names_.erase(name); });
    handle("ping", [this] { return static_cast<int64_t>(rank_); });
  }

 private:
  ActorRef spawn(std::string name, const std::string& factory, const List& args) {
    if (names_.count(name)) {
      throw ActorError("rank " + std::to_string(rank_) + " already has an actor named '" + name + "'");
    }
    Factory make = find_factory(factory);
    if (!make) {
      std::string known;
      for (const auto& n : factory_names()) known += (known.empty() ? "" : ", ") + n;
      throw ActorError("no factory '" + factory + "' in the registry (registered: " +
                       (known.empty() ? std::string("none") : known) +
                       "); register it on every rank with actors::register_actor / register_factory");
    }
    std::unique_ptr<Actor> actor;
    try {
      actor = make(args);
    } catch (const std::exception& e) {
      throw ActorError("factory '" + factory + "' threw: " + e.what());
    }
    if (!actor) throw ActorError("factory '" + factory + "' returned no actor");
    ActorRef ref = spawn_host(rank_, name, std::move(actor));
    names_[name] = ref;
    return ref;
  }

  int rank_;
  std::map<std::string, ActorRef> names_;
};

}  // namespace

std::unique_ptr<Actor> make_rank_service(int rank) { return std::make_unique<RankService>(rank); }
std::string service_name(int rank) { return "troupe.rank" + std::to_string(rank); }

}  // namespace troupe::actors::detail
