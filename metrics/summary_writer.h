// SummaryWriter (torch.utils.tensorboard's, for scalars): add_scalar(tag, value, step) from any rank;
// the group's rank 0 writes every record to <log_dir>/metrics.jsonl, <log_dir>/metrics.csv and a
// TensorBoard event file <log_dir>/events.out.tfevents.<time>.<host>.<pid>.<n>.
//
//   metrics::SummaryWriter writer("runs/digits", metrics::SummaryWriterOptions().group(ctx.world));
//   writer.add_scalar("train/loss", loss, step);   // on any rank
//   writer.flush();                                  // every rank of the group: rank 0 writes them all
//
// Ranks: without a group the writer is this thread's alone and writes what it is given. With a group
// (launch::Context::world: threads under --ranks N, processes under mpirun) only the group's rank 0
// opens files; it writes its own records as they come, and the other ranks' at flush(). The constructor
// (a broadcast: rank 0's error, if it could not open its files, is thrown on every rank), flush() (two
// all_gathers: sizes, then the records as JSON lines) and close() are collectives then: every rank of
// the group calls them at the same points of its program. The destructor does not gather: rank 0 writes
// what it holds, records still held by other ranks are dropped.
//
// A new writer (append false) starts metrics.jsonl and metrics.csv anew and removes the directory's
// older event files; append true (a resumed run) adds to them and starts a new event file beside the
// old ones, as TensorBoard expects.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <troupe/comm/process_group.h>
#include <troupe/metrics/record.h>
#include <troupe/util/options.h>

namespace troupe::metrics {

/// Options of a SummaryWriter.
struct SummaryWriterOptions {
  /// Ranks whose records are gathered to the group's rank 0 at flush(); null: this thread alone.
  TROUPE_ARG(comm::ProcessGroupPtr, group) = nullptr;
  /// Write <log_dir>/metrics.jsonl.
  TROUPE_ARG(bool, jsonl) = true;
  /// Write <log_dir>/metrics.csv.
  TROUPE_ARG(bool, csv) = true;
  /// Write a TensorBoard event file.
  TROUPE_ARG(bool, tensorboard) = true;
  /// Add to the log directory's files (a resumed run) instead of starting them anew.
  TROUPE_ARG(bool, append) = false;
  /// Appended to the event file's name (PyTorch's filename_suffix).
  TROUPE_ARG(std::string, filename_suffix) = "";
};

/// Writes scalars as JSON lines, CSV and TensorBoard events (see the top of this file).
class SummaryWriter {
 public:
  /// Creates `log_dir` (and its parents) on the writing rank. Throws MetricsError naming the path and
  /// the reason when the directory or a file cannot be created (with a group: on every rank).
  explicit SummaryWriter(std::string log_dir, SummaryWriterOptions options = {});
  /// Writes what this rank holds (no gather) and closes the files.
  ~SummaryWriter();
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  /// Logs `scalar_value` under `tag` at `global_step`; `walltime` defaults to now (seconds since the
  /// Unix epoch). The tag must be non-empty.
  void add_scalar(const std::string& tag, double scalar_value, int64_t global_step = 0,
                  std::optional<double> walltime = std::nullopt);
  /// Gathers the group's records to its rank 0, which writes them and flushes its files to disk.
  /// A collective with a group of more than one rank.
  void flush();
  /// flush(), then closes the files; later add_scalar calls throw. Idempotent.
  void close();

  /// The directory given to the constructor.
  const std::string& log_dir() const { return log_dir_; }
  /// True on the rank that writes (rank 0 of the group, or always without one).
  bool is_writer() const { return writer_; }
  /// Paths of the files this writer writes ("" where that format is off or this rank does not write).
  const std::string& jsonl_path() const { return jsonl_path_; }
  const std::string& csv_path() const { return csv_path_; }
  const std::string& event_file_path() const { return event_path_; }
  /// Records written to the files so far (on the writer; 0 elsewhere).
  int64_t records_written() const { return written_; }

 private:
  void open_files();
  void write(const Record& r);
  void close_files();

  std::string log_dir_;
  SummaryWriterOptions options_;
  bool writer_ = true;
  bool closed_ = false;
  int rank_ = 0;
  std::string jsonl_path_, csv_path_, event_path_;
  std::FILE* jsonl_ = nullptr;
  std::FILE* csv_ = nullptr;
  std::FILE* events_ = nullptr;
  std::vector<Record> pending_;  // this rank's records not yet gathered (ranks other than the writer)
  int64_t written_ = 0;
};

/// Seconds since the Unix epoch, as a double (TensorBoard's wall_time).
double wall_time_now();

}  // namespace troupe::metrics
