// LiveLog (live.h): the in-memory copy of written scalars behind the live page.
#include <troupe/metrics/live.h>

#include <algorithm>

namespace troupe::metrics {

LiveLog& LiveLog::instance() {
  static LiveLog log;
  return log;
}

void LiveLog::enable(int64_t max_points_per_tag) {
  std::lock_guard<std::mutex> g(mu_);
  max_per_tag_ = std::max<int64_t>(max_points_per_tag, 16);
  enabled_.store(true, std::memory_order_release);
}

void LiveLog::append(const Record& r) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> g(mu_);
  TagState& t = tags_[r.tag];
  if (t.seen++ % t.stride != 0) return;  // keeps every stride-th record of the tag
  entries_.push_back({next_seq_++, r});
  if (++t.kept <= max_per_tag_) return;
  // Too many points of this tag: keep every other one (records 0, 2s, 4s, ... of the tag) and double
  // the stride, so the kept points stay evenly spaced over the whole run.
  int64_t i = 0;
  std::vector<Entry> out;
  out.reserve(entries_.size());
  for (auto& e : entries_) {
    if (e.record.tag == r.tag && i++ % 2 != 0) continue;
    out.push_back(std::move(e));
  }
  entries_.swap(out);
  t.kept = (t.kept + 1) / 2;
  t.stride *= 2;
  ++generation_;
}

LiveLog::Slice LiveLog::since(int64_t cursor, int64_t generation) const {
  std::lock_guard<std::mutex> g(mu_);
  Slice s;
  s.generation = generation_;
  s.cursor = next_seq_ - 1;
  s.reset = generation != generation_;
  auto first = entries_.begin();
  if (!s.reset) {
    first = std::upper_bound(entries_.begin(), entries_.end(), cursor,
                             [](int64_t c, const Entry& e) { return c < e.seq; });
  }
  for (auto it = first; it != entries_.end(); ++it) s.records.push_back(it->record);
  return s;
}

void LiveLog::clear() {
  std::lock_guard<std::mutex> g(mu_);
  entries_.clear();
  tags_.clear();
  ++generation_;
}

}  // namespace troupe::metrics
