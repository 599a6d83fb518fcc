// The live page (dashboard.h): the cpp-httplib server, its token check, and the JSON it serves.
#include <troupe/launch/dashboard.h>

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <unistd.h>

#include <httplib.h>

#include <troupe/actors/auth.h>
#include <troupe/actors/introspect.h>
#include <troupe/actors/remote_module.h>
#include <troupe/comm/process_group.h>
#include <troupe/comm/stats.h>
#include <troupe/metrics/live.h>
#include <troupe/metrics/record.h>
#include <troupe/parallel/ddp.h>
#include <troupe/parallel/zero.h>

#ifndef TROUPE_CHARTJS_PATH
#define TROUPE_CHARTJS_PATH "/usr/share/javascript/chart.js/chart.min.js"
#endif

namespace troupe::launch {

namespace dashboard_page {
extern const char* const kHtml;  // dashboard_page.cpp
extern const char* const kScript;
extern const char* const kStyle;
}  // namespace dashboard_page

namespace {

// ---- JSON text

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == '<' || c == '>' || c == '&') {  // also keeps the JSON inert inside HTML
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

/// A finite number in its shortest form; NaN and infinities as null (JSON has no such numbers).
std::string num(double v) { return std::isfinite(v) ? metrics::format_double(v) : "null"; }
std::string num(int64_t v) { return std::to_string(v); }

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// ---- parameter placement (watch_model)

struct WatchedParam {
  std::string name, shape, placement;
  int64_t numel = 0;
};

std::mutex g_models_mu;
std::map<std::string, std::vector<WatchedParam>>& models() {
  static std::map<std::string, std::vector<WatchedParam>> m;
  return m;
}

std::string shape_of(const Tensor& t) {
  if (!t.defined()) return "undefined";
  std::string s = "(";
  for (size_t i = 0; i < t.sizes().size(); ++i) s += (i ? ", " : "") + std::to_string(t.sizes()[i]);
  return s + (t.sizes().size() == 1 ? ",)" : ")");
}

std::string group_desc(const comm::ProcessGroupPtr& g) {
  if (!g) return "no group";
  return "'" + g->options().name + "' (" + std::to_string(g->size()) + " rank" + (g->size() == 1 ? "" : "s") + ", " +
         g->backend() + ")";
}

void add_params(const nn::Module& m, const std::string& prefix, bool recurse, const std::string& placement,
                std::vector<WatchedParam>& out) {
  for (const auto& [name, t] : m.named_parameters(prefix, recurse)) {
    out.push_back({name, shape_of(t), placement, t.defined() ? t.numel() : 0});
  }
}

void walk(const nn::ModulePtr& m, const std::string& prefix, const std::string& placement, std::vector<WatchedParam>& out) {
  if (auto* rm = dynamic_cast<actors::RemoteModule*>(m.get())) {
    add_params(*rm, prefix, true, "hosted on rank " + std::to_string(rm->host_rank()) + " by '" + rm->host_actor().name() + "'", out);
    return;
  }
  std::string here = placement;
  if (auto* ddp = dynamic_cast<parallel::DistributedDataParallel*>(m.get())) {
    here = "replicated over " + group_desc(ddp->process_group()) + ", DDP";
  } else if (auto* fsdp = dynamic_cast<parallel::FullyShardedDataParallel*>(m.get())) {
    here = "sharded over " + group_desc(fsdp->process_group()) + ", FSDP";
  }
  add_params(*m, prefix, false, here, out);
  for (const auto& [name, child] : m->named_children()) walk(child, prefix.empty() ? name : prefix + "." + name, here, out);
}

// ---- the server's state

std::string token_from_cookie(const std::string& cookie) {
  const std::string key = "troupe_dashboard=";
  size_t at = 0;
  while ((at = cookie.find(key, at)) != std::string::npos) {
    if (at == 0 || cookie[at - 1] == ' ' || cookie[at - 1] == ';') {
      size_t end = cookie.find(';', at);
      return cookie.substr(at + key.size(), end == std::string::npos ? std::string::npos : end - at - key.size());
    }
    at += key.size();
  }
  return "";
}

Dashboard* g_dashboard = nullptr;
std::mutex g_dashboard_mu;

}  // namespace

DashboardOptions parse_dashboard_option(const std::string& value) {
  DashboardOptions o;
  std::string port = value;
  const size_t colon = value.rfind(':');
  if (colon != std::string::npos) {
    o.bind = value.substr(0, colon);
    port = value.substr(colon + 1);
    if (o.bind.size() >= 2 && o.bind.front() == '[' && o.bind.back() == ']') o.bind = o.bind.substr(1, o.bind.size() - 2);
  }
  auto bad = [&](const std::string& why) {
    return std::invalid_argument("[launch] --dashboard needs PORT or ADDR:PORT with PORT in [0, 65535], got '" + value +
                                 "' (" + why + ")");
  };
  if (o.bind.empty()) throw bad("empty address");
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    throw bad("the port is not a number");
  }
  o.port = std::stoi(port);
  if (o.port > 65535) throw bad("the port is out of range");
  return o;
}

void watch_model(const std::string& name, const nn::ModulePtr& model) {
  if (auto w = comm::world(); w && w->rank() != 0) return;  // the page shows rank 0's view
  std::vector<WatchedParam> params;
  if (model) walk(model, "", "local (rank 0)", params);
  std::lock_guard<std::mutex> g(g_models_mu);
  models()[name] = std::move(params);
}

Dashboard* dashboard() {
  std::lock_guard<std::mutex> g(g_dashboard_mu);
  return g_dashboard;
}

struct Dashboard::Impl {
  DashboardOptions options;
  DashboardSource source;
  std::string token;
  int port = 0;
  double started_at = wall_now();
  httplib::Server server;
  std::thread thread;
  std::string chartjs;  // the file's bytes ("" when libjs-chart.js is not installed)

  // The last topology report and the counts of the one before it (for the message rates).
  std::mutex mu;
  double last_at = 0;
  std::string last_json;
  std::map<std::string, std::pair<double, int64_t>> prev_counts;  // "name@rank" -> (time, messages)

  bool authorized(const httplib::Request& req) const {
    std::string t = req.get_param_value("token");
    if (t.empty()) t = token_from_cookie(req.get_header_value("Cookie"));
    return actors::auth::same_token(t, token);
  }

  std::string topology() {
    std::lock_guard<std::mutex> g(mu);
    const double now = wall_now();
    if (!last_json.empty() && now - last_at < 0.5) return last_json;  // many tabs, one report per 0.5 s

    std::vector<actors::RankInfo> ranks;
    std::string error;
    if (source.runtime) {
      try {
        ranks = actors::inspect(*source.runtime);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    if (ranks.empty()) {  // no actors (or they failed to answer): this process alone
      actors::RankInfo r;
      r.rank = 0;
      r.host = source.host;
      r.pid = static_cast<int64_t>(getpid());
      r.collectives = comm::collective_stats();
      ranks.push_back(std::move(r));
    }

    std::string s = "{\"run\":{\"backend\":" + quote(source.backend) + ",\"size\":" + std::to_string(source.size) +
                    ",\"host\":" + quote(source.host) + ",\"started_at\":" + num(started_at) + ",\"now\":" + num(now) +
                    ",\"actors\":" + (source.runtime ? "true" : "false") + "},\"error\":" + quote(error) + ",\"ranks\":[";
    std::map<std::string, std::pair<double, int64_t>> counts;
    for (size_t i = 0; i < ranks.size(); ++i) {
      const auto& r = ranks[i];
      s += std::string(i ? "," : "") + "{\"rank\":" + std::to_string(r.rank) + ",\"host\":" + quote(r.host) +
           ",\"pid\":" + num(r.pid) + ",\"actors\":[";
      for (size_t j = 0; j < r.actors.size(); ++j) {
        const auto& a = r.actors[j];
        const std::string key = a.name + "@" + std::to_string(r.rank);
        counts[key] = {now, a.messages};
        double rate = -1;
        auto p = prev_counts.find(key);
        if (p != prev_counts.end() && now > p->second.first) rate = (a.messages - p->second.second) / (now - p->second.first);
        const double age = std::max(now - a.spawned_at, 1e-9);
        s += std::string(j ? "," : "") + "{\"name\":" + quote(a.name) + ",\"id\":" + quote(key) +
             ",\"factory\":" + quote(a.factory) + ",\"messages\":" + num(a.messages) + ",\"queued\":" + num(a.queued) +
             ",\"errors\":" + num(a.errors) +
             ",\"rate\":" + (rate < 0 ? std::string("null") : num(rate)) + ",\"busy_seconds\":" + num(a.busy_seconds) +
             ",\"busy_fraction\":" + num(std::min(a.busy_seconds / age, 1.0)) + ",\"busy\":" + (a.busy ? "true" : "false") +
             ",\"method\":" + quote(a.current_method) + ",\"last_message_at\":" + num(a.last_message_at) +
             ",\"last_error\":" + quote(a.last_error) + ",\"modules\":[";
        for (size_t k = 0; k < a.modules.size(); ++k) s += std::string(k ? "," : "") + quote(a.modules[k]);
        s += "]}";
      }
      s += "]}";
    }
    // Collectives: one list per process (with --ranks N every rank reports the same process).
    s += "],\"collectives\":[";
    std::vector<int64_t> seen;
    bool first = true;
    for (const auto& r : ranks) {
      if (std::find(seen.begin(), seen.end(), r.pid) != seen.end()) continue;
      seen.push_back(r.pid);
      for (const auto& c : r.collectives) {
        s += std::string(first ? "" : ",") + "{\"host\":" + quote(r.host) + ",\"pid\":" + num(r.pid) +
             ",\"group\":" + quote(c.group) + ",\"backend\":" + quote(c.backend) + ",\"rank\":" + std::to_string(c.rank) +
             ",\"size\":" + std::to_string(c.size) + ",\"op\":" + quote(c.op) + ",\"count\":" + num(c.count) +
             ",\"completed\":" + num(c.completed) + ",\"bytes\":" + num(c.bytes) + ",\"total_seconds\":" +
             num(c.total_seconds) + ",\"last_seconds\":" + num(c.last_seconds) + ",\"max_seconds\":" + num(c.max_seconds) + "}";
        first = false;
      }
    }
    s += "],\"models\":[";
    {
      std::lock_guard<std::mutex> gm(g_models_mu);
      bool fm = true;
      for (const auto& [name, params] : models()) {
        s += std::string(fm ? "" : ",") + "{\"name\":" + quote(name) + ",\"params\":[";
        for (size_t k = 0; k < params.size(); ++k) {
          const auto& p = params[k];
          s += std::string(k ? "," : "") + "{\"name\":" + quote(p.name) + ",\"shape\":" + quote(p.shape) +
               ",\"numel\":" + num(p.numel) + ",\"placement\":" + quote(p.placement) + "}";
        }
        s += "]}";
        fm = false;
      }
    }
    s += "]}";
    // Rates over at least a second: a sample younger than that stays the reference.
    for (auto& [k, v] : counts) {
      auto p = prev_counts.find(k);
      if (p == prev_counts.end() || now - p->second.first >= 1.0) prev_counts[k] = v;
    }
    last_at = now;
    last_json = s;
    return s;
  }
};

Dashboard::Dashboard(DashboardOptions options, DashboardSource source) : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  d.options = options;
  d.source = std::move(source);
  d.token = actors::auth::derive_token(actors::auth::job_secret(), "dashboard");
  {
    std::ifstream f(TROUPE_CHARTJS_PATH, std::ios::binary);
    if (f) d.chartjs.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  metrics::LiveLog::instance().enable();

  auto& svr = d.server;
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, which would let a second run share the port.
  svr.set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  svr.new_task_queue = [] { return new httplib::ThreadPool(2); };
  svr.set_keep_alive_max_count(20);
  svr.set_pre_routing_handler([&d](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_header("Referrer-Policy", "no-referrer");
    res.set_header("X-Content-Type-Options", "nosniff");
    if (d.authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
    res.status = 403;
    res.set_content("403 forbidden: this page needs the run's token (the URL the run printed at start)\n", "text/plain");
    return httplib::Server::HandlerResponse::Handled;
  });
  svr.Get("/", [&d](const httplib::Request&, httplib::Response& res) {
    // The cookie lets the page's own requests (and a reload without the query) in.
    res.set_header("Set-Cookie", "troupe_dashboard=" + d.token + "; Path=/; HttpOnly; SameSite=Strict");
    res.set_header("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:");
    res.set_content(dashboard_page::kHtml, "text/html; charset=utf-8");
  });
  svr.Get("/app.js", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(dashboard_page::kScript, "text/javascript; charset=utf-8");
  });
  svr.Get("/app.css", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(dashboard_page::kStyle, "text/css; charset=utf-8");
  });
  svr.Get("/chart.js", [&d](const httplib::Request&, httplib::Response& res) {
    if (d.chartjs.empty()) {
      res.status = 404;
      res.set_content("// Chart.js is not installed (apt-get install libjs-chart.js): " TROUPE_CHARTJS_PATH "\n",
                      "text/javascript");
      return;
    }
    res.set_content(d.chartjs, "text/javascript; charset=utf-8");
  });
  svr.Get("/api/topology", [&d](const httplib::Request&, httplib::Response& res) {
    res.set_content(d.topology(), "application/json");
  });
  svr.Get("/api/curves", [this](const httplib::Request& req, httplib::Response& res) {
    auto arg = [&](const char* k) -> int64_t {
      try {
        return req.has_param(k) ? std::stoll(req.get_param_value(k)) : 0;
      } catch (const std::exception&) {
        return 0;
      }
    };
    res.set_content(curves_json(arg("cursor"), arg("generation")), "application/json");
  });

  errno = 0;
  if (options.port == 0) {
    d.port = svr.bind_to_any_port(options.bind);
  } else {
    d.port = svr.bind_to_port(options.bind, options.port) ? options.port : -1;
  }
  if (d.port <= 0) {
    const int err = errno;
    std::string why = err ? std::strerror(err) : "the address is not one of this host's, or the port is taken";
    throw std::runtime_error("[dashboard] cannot listen on " + options.bind + ":" + std::to_string(options.port) + ": " + why);
  }
  d.thread = std::thread([&svr] { svr.listen_after_bind(); });
  // stop() does nothing to a server whose loop has not started yet: wait for it, so that the destructor
  // can always end it.
  for (int i = 0; i < 5000 && !svr.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::lock_guard<std::mutex> g(g_dashboard_mu);
  if (!g_dashboard) g_dashboard = this;
}

Dashboard::~Dashboard() {
  {
    std::lock_guard<std::mutex> g(g_dashboard_mu);
    if (g_dashboard == this) g_dashboard = nullptr;
  }
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int Dashboard::port() const { return impl_->port; }
const std::string& Dashboard::token() const { return impl_->token; }

std::string Dashboard::url() const {
  std::string host = impl_->options.bind;
  if (host == "0.0.0.0" || host == "::") host = impl_->source.host;
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return "http://" + host + ":" + std::to_string(impl_->port) + "/?token=" + impl_->token;
}

std::string Dashboard::topology_json() { return impl_->topology(); }

std::string Dashboard::curves_json(int64_t cursor, int64_t generation) {
  auto slice = metrics::LiveLog::instance().since(cursor, generation);
  // {"cursor":..,"generation":..,"reset":..,"tags":{"train/loss":[[step,value,wall_time,rank],...]}}
  std::map<std::string, std::string> by_tag;
  for (const auto& r : slice.records) {
    std::string& s = by_tag[r.tag];
    s += std::string(s.empty() ? "" : ",") + "[" + num(r.step) + "," + num(r.value) + "," + num(r.wall_time) + "," +
         std::to_string(r.rank) + "]";
  }
  std::string out = "{\"cursor\":" + num(slice.cursor) + ",\"generation\":" + num(slice.generation) +
                    ",\"reset\":" + (slice.reset ? "true" : "false") + ",\"tags\":{";
  bool first = true;
  for (const auto& [tag, s] : by_tag) {
    out += std::string(first ? "" : ",") + quote(tag) + ":[" + s + "]";
    first = false;
  }
  return out + "}}";
}

}  // namespace troupe::launch
