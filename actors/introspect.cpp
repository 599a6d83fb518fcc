// actors::inspect (introspect.h): every rank service's report, and the Value form it travels in; the
// hand-over of a module host's paths to the service that spawns it.
#include <troupe/actors/introspect.h>

#include <map>
#include <mutex>

#include <troupe/actors/internal/services.h>

namespace troupe::actors {
namespace detail {
namespace {

std::mutex g_hosted_mu;
std::map<const void*, std::vector<std::string>>& hosted() {
  static std::map<const void*, std::vector<std::string>> m;
  return m;
}

Value strings(const std::vector<std::string>& xs) { return to_value(xs); }

}  // namespace

void note_hosted_modules(const void* actor, std::vector<std::string> modules) {
  std::lock_guard<std::mutex> g(g_hosted_mu);
  hosted()[actor] = std::move(modules);
}

std::vector<std::string> take_hosted_modules(const void* actor) {
  std::lock_guard<std::mutex> g(g_hosted_mu);
  auto it = hosted().find(actor);
  if (it == hosted().end()) return {};
  auto out = std::move(it->second);
  hosted().erase(it);
  return out;
}

// A RankInfo as a positional list: rank, host, pid, [actor...], [collective...].
Value encode_rank_info(const RankInfo& info) {
  List actors;
  for (const auto& a : info.actors) {
    actors.push_back(List{a.name, a.factory, a.messages, a.errors, a.busy_seconds, a.busy, a.current_method, a.spawned_at,
                          a.last_message_at, a.last_error, strings(a.modules), a.queued});
  }
  List colls;
  for (const auto& s : info.collectives) {
    colls.push_back(List{s.group, s.backend, int64_t{s.rank}, int64_t{s.size}, s.op, s.count, s.completed, s.bytes,
                         s.total_seconds, s.last_seconds, s.max_seconds});
  }
  return List{int64_t{info.rank}, info.host, info.pid, Value(std::move(actors)), Value(std::move(colls))};
}

RankInfo decode_rank_info(const Value& v) {
  const List& l = v.as<List>();
  if (l.size() != 5) throw ActorError("[actors] inspect: a rank's report has " + std::to_string(l.size()) + " fields, expected 5");
  RankInfo r;
  r.rank = static_cast<int>(l[0].as<int64_t>());
  r.host = l[1].as<std::string>();
  r.pid = l[2].as<int64_t>();
  for (const auto& x : l[3].as<List>()) {
    const List& f = x.as<List>();
    ActorInfo a;
    a.name = f.at(0).as<std::string>();
    a.factory = f.at(1).as<std::string>();
    a.messages = f.at(2).as<int64_t>();
    a.errors = f.at(3).as<int64_t>();
    a.busy_seconds = f.at(4).as<double>();
    a.busy = f.at(5).as<bool>();
    a.current_method = f.at(6).as<std::string>();
    a.spawned_at = f.at(7).as<double>();
    a.last_message_at = f.at(8).as<double>();
    a.last_error = f.at(9).as<std::string>();
    a.modules = from_value<std::vector<std::string>>(f.at(10));
    a.queued = f.at(11).as<int64_t>();
    r.actors.push_back(std::move(a));
  }
  for (const auto& x : l[4].as<List>()) {
    const List& f = x.as<List>();
    comm::CollectiveStats s;
    s.group = f.at(0).as<std::string>();
    s.backend = f.at(1).as<std::string>();
    s.rank = static_cast<int>(f.at(2).as<int64_t>());
    s.size = static_cast<int>(f.at(3).as<int64_t>());
    s.op = f.at(4).as<std::string>();
    s.count = f.at(5).as<int64_t>();
    s.completed = f.at(6).as<int64_t>();
    s.bytes = f.at(7).as<int64_t>();
    s.total_seconds = f.at(8).as<double>();
    s.last_seconds = f.at(9).as<double>();
    s.max_seconds = f.at(10).as<double>();
    r.collectives.push_back(std::move(s));
  }
  return r;
}

}  // namespace detail

std::vector<RankInfo> inspect(const Runtime& rt) {
  std::vector<Future<Value>> asks;
  for (int r = 0; r < rt.size(); ++r) asks.push_back(rt.service(r).request<Value>("stats"));
  std::vector<RankInfo> out;
  for (auto& f : asks) out.push_back(detail::decode_rank_info(f.get()));
  return out;
}

}  // namespace troupe::actors
