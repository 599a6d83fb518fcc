// One logged scalar (tag, step, value, wall time, rank) and its two text forms: a JSON line and a CSV
// row, written by SummaryWriter and read back by the plots (and anything else: `jq`, pandas).
//
//   {"tag":"train/loss","step":3,"value":0.25,"wall_time":1723456789.123456,"rank":0}
//   wall_time,step,rank,tag,value                    (CSV header; then one row per record)
//
// Numbers are written in their shortest round-trip form, so a value read back is the value logged;
// NaN and infinities as Python's json module writes them (NaN, Infinity, -Infinity).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::metrics {

/// What the metrics layer throws: a file that cannot be read or written, a malformed record.
class MetricsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One scalar: `tag` (a name such as "train/loss") at `step`, logged by `rank` at `wall_time`
/// (seconds since the Unix epoch, as TensorBoard's Event.wall_time).
struct Record {
  std::string tag;
  int64_t step = 0;
  double value = 0;
  double wall_time = 0;
  int rank = 0;
  bool operator==(const Record&) const = default;
};

/// The JSON line of `r`, without the newline.
std::string to_json(const Record& r);
/// Parses one JSON line written by to_json (keys in any order; "rank" and "wall_time" may be absent,
/// then 0). Throws MetricsError saying what is wrong and where in the line.
Record parse_json(std::string_view line);
/// Every record of a JSON lines file (blank lines skipped). Throws MetricsError naming the file and
/// line: "[metrics] runs/x/metrics.jsonl:7: expected ':' after key \"step\" at column 14".
std::vector<Record> read_jsonl(const std::string& path);

/// "wall_time,step,rank,tag,value".
const char* csv_header();
/// The CSV row of `r` (the tag quoted as RFC 4180 when it holds a comma, quote or newline).
std::string to_csv(const Record& r);

/// Shortest text that reads back as `v` ("0.1", "1e-05", "NaN", "Infinity").
std::string format_double(double v);

}  // namespace troupe::metrics
