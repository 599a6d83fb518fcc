// The live page's server side (launch/dashboard.h) and what feeds it: --dashboard's parsing and errors,
// the token check (403 and no data without it), the topology and curves JSON from a run of 2 ranks with
// actors and a hosted module, actors::inspect's counters, comm::collective_stats, metrics::LiveLog and
// watch_model's placement. The page in a real browser: examples/CMakeLists.txt's
// example_actor_dashboard_browser (tests/launch/dashboard_check.py).
#include <gtest/gtest.h>

#include <sys/socket.h>

#include <httplib.h>

#include <troupe/actors/actors.h>
#include <troupe/comm/local.h>
#include <troupe/comm/stats.h>
#include <troupe/launch/dashboard.h>
#include <troupe/metrics/live.h>
#include <troupe/metrics/summary_writer.h>
#include <troupe/nn/nn.h>
#include <troupe/parallel/ddp.h>
#include <troupe/tensor/ops.h>

#include "actors/actors_helpers.h"

using namespace troupe;
using actors::testing::contains;

namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

launch::DashboardOptions any_port() { return launch::DashboardOptions{"127.0.0.1", 0}; }

launch::DashboardSource no_actors() {
  launch::DashboardSource s;
  s.size = 1;
  s.backend = "local";
  s.host = "testhost";
  return s;
}

}  // namespace

TEST(Dashboard, ParsesPortAndAddress) {
  auto o = launch::parse_dashboard_option("8080");
  EXPECT_EQ(o.bind, "127.0.0.1");  // loopback unless told otherwise
  EXPECT_EQ(o.port, 8080);
  o = launch::parse_dashboard_option("0.0.0.0:9000");
  EXPECT_EQ(o.bind, "0.0.0.0");
  EXPECT_EQ(o.port, 9000);
  o = launch::parse_dashboard_option("[::1]:0");
  EXPECT_EQ(o.bind, "::1");
  EXPECT_EQ(o.port, 0);
  for (const char* bad : {"abc", "70000", "", ":80", "-1", "80x", "123456"}) {
    std::string e = error_of([&] { launch::parse_dashboard_option(bad); });
    EXPECT_TRUE(contains(e, "[launch] --dashboard needs PORT or ADDR:PORT with PORT in [0, 65535], got '" + std::string(bad) + "'"))
        << e;
  }
}

TEST(Dashboard, BadFlagOfLaunchRunIsOneError) {
  std::string a0 = "prog", a1 = "--dashboard", a2 = "http";
  char* argv[] = {a0.data(), a1.data(), a2.data(), nullptr};
  std::string e = error_of([&] { launch::run(3, argv, [](launch::Context&) { return 0; }); });
  EXPECT_TRUE(contains(e, "got 'http' (the port is not a number)")) << e;
  char* argv2[] = {a0.data(), a1.data(), nullptr};
  e = error_of([&] { launch::run(2, argv2, [](launch::Context&) { return 0; }); });
  EXPECT_EQ(e, "[launch] --dashboard needs a value (PORT or ADDR:PORT)");
}

TEST(Dashboard, NeedsTheTokenAndGivesNoDataWithoutIt) {
  launch::Dashboard d(any_port(), no_actors());
  ASSERT_GT(d.port(), 0);
  EXPECT_EQ(d.token().size(), 32u);
  EXPECT_EQ(d.url(), "http://127.0.0.1:" + std::to_string(d.port()) + "/?token=" + d.token());
  httplib::Client cli("127.0.0.1", d.port());
  std::string wrong = d.token();
  wrong[0] = wrong[0] == 'a' ? 'b' : 'a';
  for (const char* path : {"/", "/app.js", "/chart.js", "/api/topology", "/api/curves"}) {
    for (const std::string& query : {std::string(""), std::string("?token="), "?token=" + wrong, "?token=" + d.token() + "0"}) {
      auto r = cli.Get((path + query).c_str());
      ASSERT_TRUE(r) << path << query;
      EXPECT_EQ(r->status, 403) << path << query;
      EXPECT_FALSE(contains(r->body, "testhost")) << path << query;
      EXPECT_FALSE(contains(r->body, "{")) << path << query;
    }
    httplib::Headers bad_cookie = {{"Cookie", "troupe_dashboard=" + wrong}};
    auto r = cli.Get(path, bad_cookie);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403) << path;
  }
  // The token in the query, then the cookie the page sets.
  auto page = cli.Get(("/?token=" + d.token()).c_str());
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_TRUE(contains(page->body, "<script src=\"chart.js\"></script>"));
  EXPECT_TRUE(contains(page->get_header_value("Set-Cookie"), "troupe_dashboard=" + d.token()));
  httplib::Headers cookie = {{"Cookie", "theme=dark; troupe_dashboard=" + d.token()}};
  auto topo = cli.Get("/api/topology", cookie);
  ASSERT_TRUE(topo);
  EXPECT_EQ(topo->status, 200);
  EXPECT_TRUE(contains(topo->body, "\"host\":\"testhost\"")) << topo->body;
  auto js = cli.Get(("/chart.js?token=" + d.token()).c_str());
  ASSERT_TRUE(js);
  if (js->status == 200) {
    EXPECT_TRUE(contains(js->body, "Chart")) << "libjs-chart.js's file";
  }
}

TEST(Dashboard, PortInUseIsOneClearError) {
  launch::Dashboard first(any_port(), no_actors());
  std::string e = error_of([&] { launch::Dashboard second({"127.0.0.1", first.port()}, no_actors()); });
  EXPECT_EQ(e, "[dashboard] cannot listen on 127.0.0.1:" + std::to_string(first.port()) + ": Address already in use");
  e = error_of([&] { launch::Dashboard third({"203.0.113.7", 8080}, no_actors()); });  // not this host's address
  EXPECT_TRUE(contains(e, "[dashboard] cannot listen on 203.0.113.7:8080: ")) << e;
}

TEST(Dashboard, LaunchRunServesTheRunAndPrintsTheUrl) {
  actors::testing::register_test_actors();
  actors::register_module<nn::LinearImpl, int64_t, int64_t>("Linear");
  std::string a0 = "prog", a1 = "--ranks", a2 = "2", a3 = "--dashboard", a4 = "0";
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), a4.data(), nullptr};
  testing::internal::CaptureStdout();
  std::string error = error_of([&] { launch::run(5, argv, [](launch::Context& ctx) {
    auto& rt = ctx.actors();
    if (ctx.rank == 0) {
      launch::Dashboard* d = launch::dashboard();
      EXPECT_NE(d, nullptr);
      auto c = rt.spawn_on(1, "c", "Counter", int64_t{0});
      for (int i = 0; i < 5; ++i) c.request<int64_t>("add", 1).get();
      EXPECT_FALSE(actors::testing::error_of([&] { c.request<int64_t>("fail", std::string("no")).get(); }).empty());
      auto lin = actors::host(rt, 1, "Linear", {int64_t{4}, int64_t{3}}, "lin");
      launch::watch_model("net", lin);

      // actors::inspect: rank 1's counters
      auto ranks = actors::inspect(rt);
      EXPECT_EQ(ranks.size(), 2u);
      const actors::ActorInfo* counter = nullptr;
      const actors::ActorInfo* host = nullptr;
      for (const auto& a : ranks.at(1).actors) {
        if (a.name == "c") counter = &a;
        if (a.name == "lin") host = &a;
      }
      EXPECT_TRUE(ranks.at(0).actors.empty());
      if (counter && host) {
        EXPECT_EQ(counter->factory, "Counter");
        EXPECT_EQ(counter->messages, 6);
        EXPECT_EQ(counter->errors, 1);
        EXPECT_EQ(counter->last_error, "fail: counter refused: no");
        EXPECT_GT(counter->busy_seconds, 0.0);
        EXPECT_GT(counter->last_message_at, counter->spawned_at - 1e-3);
        EXPECT_TRUE(counter->modules.empty());
        EXPECT_EQ(host->factory, "troupe.ModuleHost");
        EXPECT_EQ(host->modules, (std::vector<std::string>{"(root) (Linear)"}));
      } else {
        ADD_FAILURE() << "rank 1 does not report actors c and lin";
      }
      EXPECT_EQ(ranks.at(0).pid, ranks.at(1).pid);  // --ranks 2: one process

      if (d) {
        std::string t = d->topology_json();
        EXPECT_TRUE(contains(t, "\"size\":2")) << t;
        EXPECT_TRUE(contains(t, "\"id\":\"c@1\"")) << t;
        EXPECT_TRUE(contains(t, "\"last_error\":\"fail: counter refused: no\"")) << t;
        EXPECT_TRUE(contains(t, "\"modules\":[\"(root) (Linear)\"]")) << t;
        EXPECT_TRUE(contains(t, "{\"name\":\"weight\",\"shape\":\"(3, 4)\",\"numel\":12,\"placement\":\"hosted on rank 1 by 'lin'\"}"))
            << t;
        httplib::Client cli("127.0.0.1", d->port());
        auto r = cli.Get(("/api/topology?token=" + d->token()).c_str());
        EXPECT_TRUE(r && r->status == 200 && contains(r->body, "\"id\":\"lin@1\""));
      }
    }
    ctx.world->barrier();
    return 0;
  }); });
  std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(error, "");
  EXPECT_TRUE(contains(out, "[troupe] dashboard http://127.0.0.1:")) << out;
  EXPECT_EQ(launch::dashboard(), nullptr);  // stopped with the run
}

// Queue lengths: one-way messages sent behind a handler that sleeps wait in the mailbox, and inspect
// (and the page) count them; once run, none is left. The rate is messages over the time between reports.
TEST(Dashboard, QueueLengthAndRatePerActor) {
  actors::testing::register_test_actors();
  std::string a0 = "prog", a1 = "--ranks", a2 = "2", a3 = "--dashboard", a4 = "0";
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), a4.data(), nullptr};
  testing::internal::CaptureStdout();
  std::string error = error_of([&] { launch::run(5, argv, [](launch::Context& ctx) {
    auto& rt = ctx.actors();
    if (ctx.rank == 0) {
      auto c = rt.spawn_on(1, "q", "Counter", int64_t{0});
      auto info = [&] {
        const auto ranks = actors::inspect(rt);
        for (const auto& a : ranks.at(1).actors)
          if (a.name == "q") return a;
        ADD_FAILURE() << "rank 1 does not report q";
        return actors::ActorInfo{};
      };
      const auto sent = std::chrono::steady_clock::now();
      const double wall_sent = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      c.send("sleep_ms", int64_t{600});
      for (int64_t i = 0; i < 10; ++i) c.send("append", i);
      actors::ActorInfo a;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      do a = info(); while (a.current_method != "sleep_ms" && std::chrono::steady_clock::now() < deadline);
      EXPECT_EQ(a.current_method, "sleep_ms");
      EXPECT_EQ(a.queued, 10) << "ten appends wait behind the sleeping handler";
      using clock = std::chrono::steady_clock;
      launch::Dashboard* d = launch::dashboard();
      if (!d) {
        ADD_FAILURE() << "no dashboard";
        return 0;
      }
      const auto ta0 = clock::now();
      std::string t = d->topology_json();  // q has handled 0-11 messages by now
      const auto ta1 = clock::now();
      EXPECT_TRUE(contains(t, "\"id\":\"q@1\"") && contains(t, "\"queued\":10")) << t;
      EXPECT_EQ(c.request<std::vector<int64_t>>("seen").get().size(), 10u);
      a = info();
      EXPECT_EQ(a.queued, 0);
      EXPECT_EQ(a.messages, 12);
      // Busy time: the 600 ms sleep and the rest, no more than the time since it was sent (the counters
      // read a tick clock that is converted to seconds when read); the last message ended since then.
      const double since = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
      const double wall = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      EXPECT_GE(a.busy_seconds, 0.6 * 0.99);
      EXPECT_LE(a.busy_seconds, since * 1.01 + 1e-3);
      EXPECT_GE(a.last_message_at, wall_sent + 0.6 * 0.99 - 5e-3);
      EXPECT_LE(a.last_message_at, wall + 5e-3);
      std::this_thread::sleep_for(std::chrono::milliseconds(600));  // past the report cache (0.5 s)
      for (int i = 0; i < 20; ++i) c.send("append", int64_t{i});
      c.request<int64_t>("get").get();  // 33 handled in all
      const auto tb0 = clock::now();
      t = d->topology_json();
      const auto tb1 = clock::now();
      // 22-33 messages between the two reports, taken between (a1, b0) and (a0, b1) apart
      const double lo = 22 / std::chrono::duration<double>(tb1 - ta0).count();
      const double hi = 33 / std::chrono::duration<double>(tb0 - ta1).count();
      auto at = t.find("\"id\":\"q@1\"");
      auto r = at == std::string::npos ? at : t.find("\"rate\":", at);
      const double rate = r == std::string::npos ? -1.0 : std::atof(t.c_str() + r + 7);
      EXPECT_GT(rate, 0.99 * lo) << t;
      EXPECT_LT(rate, 1.01 * hi) << t;
    }
    ctx.world->barrier();
    return 0;
  }); });
  testing::internal::GetCapturedStdout();
  EXPECT_EQ(error, "");
}

TEST(Dashboard, CurvesComeFromTheSummaryWritersIncrementally) {
  auto& log = metrics::LiveLog::instance();
  launch::Dashboard d(any_port(), no_actors());  // turns the log on
  log.clear();
  const std::string dir = ::testing::TempDir() + "dashboard_curves";
  {
    metrics::SummaryWriter w(dir);
    for (int i = 1; i <= 3; ++i) w.add_scalar("train/loss", 1.0 / i, i, 100.0 + i);
    w.flush();
    std::string all = d.curves_json(0, 0);
    EXPECT_TRUE(contains(all, "\"reset\":true")) << all;
    EXPECT_TRUE(contains(all, "\"tags\":{\"train/loss\":[[1,1,101,0],[2,0.5,102,0],[3,0.3333333333333333,103,0]]}")) << all;
    auto s = log.since(0, 0);
    w.add_scalar("acc", 0.5, 4, 104.0);
    w.flush();
    std::string next = d.curves_json(s.cursor, s.generation);
    EXPECT_TRUE(contains(next, "\"reset\":false,\"tags\":{\"acc\":[[4,0.5,104,0]]}")) << next;
  }
}

TEST(LiveLog, KeepsABoundedNumberOfPointsPerTag) {
  auto& log = metrics::LiveLog::instance();
  log.enable(16);
  log.clear();
  auto start = log.since(0, 0);
  for (int i = 0; i < 40; ++i) log.append({"x", i, static_cast<double>(i), 0.0, 0});
  log.append({"y", 0, 1.0, 0.0, 0});
  auto s = log.since(start.cursor, start.generation);
  EXPECT_TRUE(s.reset);  // points were dropped since: everything comes again
  EXPECT_EQ(s.records.back().tag, "y");
  // Evenly spaced over the whole run: records 0, 4, 8, ..., 36 (two drops: the stride is 4).
  std::vector<int64_t> steps;
  for (const auto& r : s.records)
    if (r.tag == "x") steps.push_back(r.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 4, 8, 12, 16, 20, 24, 28, 32, 36}));
  auto again = log.since(s.cursor, s.generation);
  EXPECT_FALSE(again.reset);
  EXPECT_TRUE(again.records.empty());
  log.enable();  // back to the default bound
}

TEST(CollectiveStats, CountsBytesAndTimesEveryOp) {
  std::vector<comm::CollectiveStats> seen;
  comm::run_local(2, [&](comm::ProcessGroupPtr pg) {
    auto g = pg->new_group({0, 1}, comm::GroupOptions{std::chrono::minutes(1), "stats-test"});
    Tensor t = ones({5});
    for (int i = 0; i < 3; ++i) g->all_reduce(t);
    g->broadcast_async(t, 0)->wait();
    g->barrier();
    pg->barrier();
    if (pg->rank() == 0) {
      for (const auto& s : comm::collective_stats())
        if (s.group == "stats-test") seen.push_back(s);
    }
    pg->barrier();  // both ranks' groups stay alive until rank 0 has read them
  });
  // (group, rank, op) order: rank 0's all_reduce, barrier, broadcast, then rank 1's
  ASSERT_EQ(seen.size(), 6u);
  for (int r = 0; r < 2; ++r) {
    const auto& ar = seen[3 * r];
    EXPECT_EQ(ar.rank, r);
    EXPECT_EQ(ar.size, 2);
    EXPECT_EQ(ar.backend, "local");
    EXPECT_EQ(ar.op, "all_reduce");
    EXPECT_EQ(ar.count, 3);
    EXPECT_EQ(ar.completed, 3);
    EXPECT_EQ(ar.bytes, 3 * 5 * 4);
    EXPECT_GT(ar.total_seconds, 0.0);
    EXPECT_GE(ar.max_seconds, ar.last_seconds);
    EXPECT_GE(ar.total_seconds, ar.max_seconds);
    EXPECT_EQ(seen[3 * r + 1].op, "barrier");
    EXPECT_EQ(seen[3 * r + 1].bytes, 0);
    EXPECT_EQ(seen[3 * r + 1].completed, 1);
    EXPECT_EQ(seen[3 * r + 2].op, "broadcast");
    EXPECT_EQ(seen[3 * r + 2].count, 1);
    EXPECT_EQ(seen[3 * r + 2].completed, 1);
    EXPECT_EQ(seen[3 * r + 2].bytes, 5 * 4);
  }
}

TEST(CollectiveStats, LiveGroupsAreListedByRank) {
  auto groups = comm::make_local_groups(1);
  Tensor t = ones({2});
  groups[0]->all_reduce(t);
  bool seen = false;
  for (const auto& s : comm::collective_stats())
    if (s.group == groups[0]->options().name && s.op == "all_reduce" && s.rank == 0 && s.count >= 1) seen = true;
  EXPECT_TRUE(seen);
}

TEST(Dashboard, WatchModelShowsPlacement) {
  launch::Dashboard d(any_port(), no_actors());
  auto net = nn::Sequential{nn::Linear(3, 2)};
  launch::watch_model("plain", net.ptr());
  auto pg = comm::make_local_groups(1).at(0);
  auto ddp = std::make_shared<parallel::DistributedDataParallel>(nn::Sequential{nn::Linear(2, 2)}.ptr(), pg);
  launch::watch_model("ddp", ddp);
  std::string t = d.topology_json();
  EXPECT_TRUE(contains(t, "{\"name\":\"0.weight\",\"shape\":\"(2, 3)\",\"numel\":6,\"placement\":\"local (rank 0)\"}")) << t;
  EXPECT_TRUE(contains(t, "{\"name\":\"module.0.bias\",\"shape\":\"(2,)\",\"numel\":2,\"placement\":\"replicated over '" +
                              pg->options().name + "' (1 rank, local), DDP\"}"))
      << t;
}
