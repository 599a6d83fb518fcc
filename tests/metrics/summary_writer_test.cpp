// SummaryWriter: what one writer puts in metrics.jsonl, metrics.csv and the event file (read back and
// checked record by record, CRCs included), append and fresh runs, records of every rank of a `local`
// group (ranks as threads) gathered to rank 0 at flush(), unwritable paths, and the event file read by
// the reference protobuf decoder (tests/metrics/check_tfevents.py; skipped without python3-protobuf).
// The MetricsMpi* tests run under mpirun (ctest metrics_mpi_np2) and skip otherwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include <troupe/comm/comm.h>
#include <troupe/metrics/summary_writer.h>
#include <troupe/metrics/tfrecord.h>
#include <troupe/tensor/ops.h>

#include <unistd.h>

using namespace troupe;
using namespace troupe::metrics;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("troupe_metrics_writer_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  return p;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) out.push_back(e.path());
  return out;
}

// Every scalar event of a file after checking its first event and every CRC.
std::vector<Record> scalars_of(const std::string& path) {
  auto recs = read_tfrecord_file(path);  // throws on a CRC or length mismatch
  EXPECT_FALSE(recs.empty());
  EXPECT_EQ(decode_event(recs.at(0)).file_version, "brain.Event:2");
  std::vector<Record> out;
  for (size_t i = 1; i < recs.size(); ++i) {
    Event ev = decode_event(recs[i]);
    EXPECT_EQ(ev.values.size(), 1u);
    for (auto& [tag, v] : ev.values) out.push_back({tag, ev.step, v, ev.wall_time, 0});
  }
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const MetricsError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(SummaryWriter, WritesJsonlCsvAndEvents) {
  fs::path dir = scratch("one") / "nested" / "run";
  std::vector<Record> want;
  {
    SummaryWriter w(dir.string());
    EXPECT_TRUE(w.is_writer());
    for (int s = 0; s < 5; ++s) {
      w.add_scalar("train/loss", 1.0 / (s + 1), s, 1000.0 + s);
      want.push_back({"train/loss", s, 1.0 / (s + 1), 1000.0 + s, 0});
    }
    w.add_scalar("test/acc", 0.9, 4, 2000.5);
    want.push_back({"test/acc", 4, 0.9, 2000.5, 0});
    w.flush();
    EXPECT_EQ(w.records_written(), 6);
    EXPECT_EQ(w.jsonl_path(), (dir / "metrics.jsonl").string());
    EXPECT_EQ(read_jsonl(w.jsonl_path()), want);  // flushed: readable while the writer is open
  }
  EXPECT_EQ(read_jsonl((dir / "metrics.jsonl").string()), want);

  auto csv = lines_of((dir / "metrics.csv").string());
  ASSERT_EQ(csv.size(), 7u);
  EXPECT_EQ(csv[0], "wall_time,step,rank,tag,value");
  EXPECT_EQ(csv[1], "1000,0,0,train/loss,1");
  EXPECT_EQ(csv[3], "1002,2,0,train/loss,0.3333333333333333");
  EXPECT_EQ(csv[6], "2000.5,4,0,test/acc,0.9");

  auto files = event_files(dir);
  ASSERT_EQ(files.size(), 1u);
  auto ev = scalars_of(files[0].string());
  ASSERT_EQ(ev.size(), want.size());
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].tag, want[i].tag);
    EXPECT_EQ(ev[i].step, want[i].step);
    EXPECT_EQ(ev[i].wall_time, want[i].wall_time);
    EXPECT_EQ(ev[i].value, static_cast<float>(want[i].value));  // simple_value is a float
  }
  fs::remove_all(scratch("one"));
}

TEST(SummaryWriter, DefaultWallTimeIsNow) {
  fs::path dir = scratch("now");
  const double before = wall_time_now();
  {
    SummaryWriter w(dir.string(), SummaryWriterOptions().csv(false).tensorboard(false));
    w.add_scalar("x", 1);
  }
  const double after = wall_time_now();
  auto rs = read_jsonl((dir / "metrics.jsonl").string());
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_GE(rs[0].wall_time, before);
  EXPECT_LE(rs[0].wall_time, after);
  EXPECT_FALSE(fs::exists(dir / "metrics.csv"));
  EXPECT_TRUE(event_files(dir).empty());
  fs::remove_all(dir);
}

TEST(SummaryWriter, FreshRunStartsAnewAppendAddsToIt) {
  fs::path dir = scratch("append");
  {
    SummaryWriter w(dir.string());
    w.add_scalar("x", 1, 1, 10);
  }
  {
    SummaryWriter w(dir.string(), SummaryWriterOptions().append(true));  // a resumed run
    w.add_scalar("x", 2, 2, 20);
  }
  EXPECT_EQ(read_jsonl((dir / "metrics.jsonl").string()).size(), 2u);
  auto csv = lines_of((dir / "metrics.csv").string());
  EXPECT_EQ(csv.size(), 3u);  // one header
  EXPECT_EQ(event_files(dir).size(), 2u);
  {
    SummaryWriter w(dir.string());  // a fresh run
    w.add_scalar("x", 3, 1, 30);
  }
  auto rs = read_jsonl((dir / "metrics.jsonl").string());
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].value, 3);
  EXPECT_EQ(lines_of((dir / "metrics.csv").string()).size(), 2u);
  ASSERT_EQ(event_files(dir).size(), 1u);
  EXPECT_EQ(scalars_of(event_files(dir)[0].string()).size(), 1u);
  fs::remove_all(dir);
}

TEST(SummaryWriter, BadPathsAndUseAfterClose) {
  fs::path file = scratch("a_file");
  std::ofstream(file) << "x";
  EXPECT_EQ(error_of([&] { SummaryWriter w((file / "run").string()); }),
            "[SummaryWriter] cannot create log directory '" + (file / "run").string() + "': Not a directory");
  EXPECT_EQ(error_of([&] { SummaryWriter w(file.string()); }),
            "[SummaryWriter] cannot create log directory '" + file.string() + "': a file of that name exists");
  EXPECT_EQ(error_of([] { SummaryWriter w(""); }), "[SummaryWriter] log_dir is empty");
  if (::geteuid() != 0) {  // root writes anywhere
    fs::path ro = scratch("readonly");
    fs::create_directories(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_EQ(error_of([&] { SummaryWriter w(ro.string()); }),
              "[SummaryWriter] cannot open '" + (ro / "metrics.jsonl").string() + "' for writing: Permission denied");
    fs::permissions(ro, fs::perms::owner_all);
    fs::remove_all(ro);
  }
  fs::remove(file);

  fs::path dir = scratch("closed");
  SummaryWriter w(dir.string());
  EXPECT_EQ(error_of([&] { w.add_scalar("", 1); }), "[SummaryWriter] add_scalar: empty tag (log_dir '" + dir.string() + "')");
  w.close();
  w.close();
  EXPECT_EQ(error_of([&] { w.add_scalar("x", 1); }),
            "[SummaryWriter] add_scalar(\"x\") after close() (log_dir '" + dir.string() + "')");
  fs::remove_all(dir);
}

// Ranks as threads (--ranks N): every rank logs, rank 0 writes everything; the others open no file.
TEST(SummaryWriter, LocalGroupGathersEveryRankToRankZero) {
  fs::path dir = scratch("local");
  const int n = 3, steps = 4;
  std::mutex m;
  std::vector<std::string> paths(n);
  comm::run_local(n, [&](comm::ProcessGroupPtr pg) {
    SummaryWriter w(dir.string(), SummaryWriterOptions().group(pg));
    {
      std::lock_guard<std::mutex> lock(m);
      paths[pg->rank()] = w.jsonl_path();
    }
    for (int s = 0; s < steps; ++s) {
      // rank r logs r+1 records a step (different sizes on each rank), one flush per step
      for (int k = 0; k <= pg->rank(); ++k) w.add_scalar("rank/" + std::to_string(k), 100 * pg->rank() + s, s, s);
      w.flush();
    }
    w.add_scalar("last", pg->rank(), steps, 0);  // left for close()
    w.close();
  });
  EXPECT_EQ(paths[0], (dir / "metrics.jsonl").string());
  EXPECT_EQ(paths[1], "");
  EXPECT_EQ(paths[2], "");
  auto rs = read_jsonl((dir / "metrics.jsonl").string());
  ASSERT_EQ(rs.size(), static_cast<size_t>(steps * (1 + 2 + 3) + n));
  std::map<int, int> per_rank;
  for (const auto& r : rs) {
    ++per_rank[r.rank];
    if (r.tag != "last") EXPECT_EQ(r.value, 100 * r.rank + r.step) << to_json(r);
    else EXPECT_EQ(r.value, r.rank);
  }
  EXPECT_EQ(per_rank[0], steps * 1 + 1);
  EXPECT_EQ(per_rank[1], steps * 2 + 1);
  EXPECT_EQ(per_rank[2], steps * 3 + 1);
  auto ev = scalars_of(event_files(dir).at(0).string());
  EXPECT_EQ(ev.size(), rs.size());
  fs::remove_all(dir);
}

// A rank with nothing to say still takes part in flush(); a flush with nothing anywhere sends no bytes.
TEST(SummaryWriter, LocalGroupEmptyFlushes) {
  fs::path dir = scratch("local_empty");
  comm::run_local(2, [&](comm::ProcessGroupPtr pg) {
    SummaryWriter w(dir.string(), SummaryWriterOptions().group(pg));
    w.flush();
    if (pg->rank() == 1) w.add_scalar("only_rank1", 5, 1, 1);
    w.flush();
    w.flush();
  });
  auto rs = read_jsonl((dir / "metrics.jsonl").string());
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0], (Record{"only_rank1", 1, 5, 1, 1}));
  fs::remove_all(dir);
}

// Rank 0 cannot open its files: every rank throws its error (none is left waiting in a collective).
TEST(SummaryWriter, LocalGroupEveryRankSeesRankZerosError) {
  fs::path file = scratch("group_file");
  std::ofstream(file) << "x";
  std::vector<std::string> errors(3);
  comm::run_local(3, [&](comm::ProcessGroupPtr pg) {
    errors[pg->rank()] = error_of([&] { SummaryWriter w((file / "run").string(), SummaryWriterOptions().group(pg)); });
    pg->barrier();  // the group still works
  });
  for (const auto& e : errors)
    EXPECT_EQ(e, "[SummaryWriter] cannot create log directory '" + (file / "run").string() + "': Not a directory");
  fs::remove(file);
}

// The event file through the reference protobuf decoder (Debian's python3-protobuf), against the JSON lines.
TEST(SummaryWriter, EventFileReadByPythonProtobuf) {
  std::string python;
  for (const char* py : {"/usr/bin/python3", "python3"}) {
    if (std::system((std::string(py) + " -c 'import google.protobuf' >/dev/null 2>&1").c_str()) == 0) {
      python = py;
      break;
    }
  }
  if (python.empty()) GTEST_SKIP() << "python3-protobuf (google.protobuf) is not installed";
  fs::path dir = scratch("python");
  {
    SummaryWriter w(dir.string());
    for (int s = 0; s < 50; ++s) w.add_scalar(s % 2 ? "train/loss" : "test/accuracy", std::exp(-0.1 * s) + 1e-9 * s, s * 37);
    w.add_scalar("weird \"tag\"/é", -1e30, -3);
    w.add_scalar("nan", std::nan(""), 1 << 30);
  }
  const std::string checker = std::string(TROUPE_METRICS_TEST_DIR) + "/check_tfevents.py";
  const std::string cmd = python + " " + checker + " '" + event_files(dir).at(0).string() + "' '" +
                          (dir / "metrics.jsonl").string() + "' 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  const int rc = ::pclose(p);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "ok: 52 scalar events match " + (dir / "metrics.jsonl").string() + "\n");
  fs::remove_all(dir);
}

#ifdef TROUPE_HAVE_MPI
// Ranks as processes (mpirun -np N): the same gather over the mpi backend. Rank 0 checks the file.
TEST(MetricsMpi, GroupGathersEveryProcessToRankZero) {
  if (!comm::started_by_mpirun()) GTEST_SKIP() << "not started by mpirun";
  static comm::ProcessGroupPtr world = [] {
    auto g = comm::make_mpi_world();
    std::atexit([] { comm::mpi_finalize(); });
    return g;
  }();
  if (world->size() < 2) GTEST_SKIP() << "needs mpirun -np 2 or more";
  // The same directory name on every rank: rank 0's pid, broadcast.
  Tensor pid = tensor(std::vector<int64_t>{static_cast<int64_t>(::getpid())});
  world->broadcast(pid, 0);
  fs::path dir = fs::temp_directory_path() / ("troupe_metrics_mpi_" + std::to_string(pid.item<int64_t>()));
  const int n = world->size(), steps = 3;
  {
    SummaryWriter w(dir.string(), SummaryWriterOptions().group(world));
    for (int s = 0; s < steps; ++s) {
      w.add_scalar("loss", 10.0 * world->rank() + s, s);
      w.flush();
    }
    w.close();
    EXPECT_EQ(w.is_writer(), world->rank() == 0);
  }
  world->barrier();
  if (world->rank() == 0) {
    auto rs = read_jsonl((dir / "metrics.jsonl").string());
    ASSERT_EQ(rs.size(), static_cast<size_t>(n * steps));
    double sum = 0;
    for (const auto& r : rs) {
      EXPECT_EQ(r.value, 10.0 * r.rank + r.step);
      sum += r.value;
    }
    EXPECT_EQ(sum, 10.0 * steps * n * (n - 1) / 2 + n * steps * (steps - 1) / 2);  // closed form in n
    EXPECT_EQ(scalars_of(event_files(dir).at(0).string()).size(), rs.size());
    fs::remove_all(dir);
  }
}
#endif
