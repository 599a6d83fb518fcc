// Fuzz entry points over the metrics files troupe-plot and the tests read: JSON lines, TensorBoard events.
#include "fuzz_common.h"

#include <troupe/metrics/record.h>
#include <troupe/metrics/tfrecord.h>

namespace troupe::fuzz {
namespace {

// ---- metrics: JSON lines (metrics/record.h) as troupe-plot reads them: read_jsonl of a file (parse_json
// per line; its errors gain the "[metrics] <file>:<line>: " prefix there)
bool run_metrics_jsonl(const uint8_t* data, size_t size) {
  const std::string path = write_file("metrics.jsonl", std::string_view(reinterpret_cast<const char*>(data), size));
  return guarded([&] { (void)metrics::read_jsonl(path); });
}
Seeds seeds_metrics_jsonl() {
  const std::string a = metrics::to_json({"train/loss", 7, 0.25, 1700000000.5, 1});
  const std::string b = metrics::to_json({"acc \"quoted\"\n", -1, 1e-300, 0, 0});
  return {{"ok-two-records", a + "\n" + b + "\n"},
          {"ok-keys-reordered", "{\"step\":3,\"value\":-2e5,\"tag\":\"x\"}"},
          {"bad-number", "{\"tag\":\"loss\",\"step\":1,\"value\":oops}"},
          {"bad-unterminated", "{\"tag\":\"lo"}};
}

// ---- TensorBoard event files (metrics/tfrecord.h): TFRecord frames, each an Event
bool run_tfevents(const uint8_t* data, size_t size) {
  return guarded([&] {
    for (const auto& record : metrics::tfrecord_split(std::string_view(reinterpret_cast<const char*>(data), size)))
      (void)metrics::decode_event(record);
  });
}
Seeds seeds_tfevents() {
  const std::string ok = metrics::tfrecord_frame(metrics::encode_file_version_event(1700000000.0)) +
                         metrics::tfrecord_frame(metrics::encode_scalar_event(1700000001.0, 12, "train/loss", 0.5f));
  std::string bad_crc = ok;
  bad_crc[10] ^= 1;
  return {{"ok-two-events", ok}, {"bad-crc", bad_crc}, {"bad-truncated", ok.substr(0, ok.size() - 2)}};
}

}  // namespace

std::vector<Entry> metrics_entries() {
  return {
      {"metrics_jsonl", "metrics.jsonl files (metrics::read_jsonl)", run_metrics_jsonl, seeds_metrics_jsonl},
      {"tfevents", "TensorBoard event files (metrics::tfrecord_split, decode_event)", run_tfevents, seeds_tfevents},
  };
}

}  // namespace troupe::fuzz
