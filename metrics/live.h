// LiveLog: an in-memory copy of the scalars this process's SummaryWriters write, for live views (the
// dashboard of launch/dashboard.h polls it). Off until enabled, so a run without a live view keeps
// nothing. Bounded: past max_points_per_tag records of one tag it drops every other one of that tag and
// from then on keeps every second record of it (then every fourth, ...), so the kept points stay evenly
// spaced over the whole run; each such drop starts a new generation.
//
//   metrics::LiveLog::instance().enable();
//   auto s = metrics::LiveLog::instance().since(0, 0);       // everything so far
//   ...
//   s = metrics::LiveLog::instance().since(s.cursor, s.generation);  // what came since (or all, on reset)
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include <troupe/metrics/record.h>

namespace troupe::metrics {

/// The process-wide log of written scalars (see the top of this file).
class LiveLog {
 public:
  /// The process's log.
  static LiveLog& instance();

  /// Starts keeping records (and sets the per-tag bound, at least 16).
  void enable(int64_t max_points_per_tag = 4096);
  /// True once enabled.
  bool enabled() const { return enabled_.load(std::memory_order_acquire); }
  /// Keeps `r` when enabled (SummaryWriter calls it for every record it writes).
  void append(const Record& r);

  /// Records after a cursor.
  struct Slice {
    /// The records, in the order written.
    std::vector<Record> records;
    /// Pass these back to get what comes next.
    int64_t cursor = 0;
    int64_t generation = 0;
    /// True when `records` is everything kept (the caller's generation was not the current one).
    bool reset = false;
  };
  /// The records written after `cursor` of `generation` (both 0 at first); everything, with reset set,
  /// when the log has dropped points since that generation.
  Slice since(int64_t cursor, int64_t generation) const;
  /// Forgets every record (tests).
  void clear();

 private:
  struct Entry {
    int64_t seq;
    Record record;
  };
  std::atomic<bool> enabled_{false};
  mutable std::mutex mu_;
  int64_t max_per_tag_ = 4096;
  int64_t next_seq_ = 1;
  int64_t generation_ = 1;
  struct TagState {
    int64_t seen = 0;    // records of the tag given to append
    int64_t stride = 1;  // one of every `stride` is kept
    int64_t kept = 0;
  };
  std::vector<Entry> entries_;
  std::map<std::string, TagState> tags_;
};

}  // namespace troupe::metrics
