// TensorBoard event files: TFRecord framing and the few fields of the Event / Summary protobufs that
// scalars need, encoded by hand (no protobuf library).
//
// A TFRecord is  uint64 length | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data),
// little-endian, where masked_crc32c(x) = rotate_right(crc32c(x), 15) + 0xa282ead8. The data is an Event:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// An event file opens with an Event whose file_version is "brain.Event:2", then one Event per scalar.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::metrics {

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `data`; crc32c("123456789") = 0xE3069283.
uint32_t crc32c(std::string_view data);
/// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8 of crc32c(data).
uint32_t masked_crc32c(std::string_view data);

/// The bytes of one TFRecord holding `data` (length, its masked CRC, data, data's masked CRC).
std::string tfrecord_frame(std::string_view data);
/// The records of a TFRecord byte string; throws MetricsError naming `what` and the byte offset of a
/// truncated record or a CRC that does not match.
std::vector<std::string> tfrecord_split(std::string_view bytes, const std::string& what = "tfrecord");
/// tfrecord_split of a file's bytes (MetricsError when it cannot be read).
std::vector<std::string> read_tfrecord_file(const std::string& path);

/// The serialized Event {wall_time, file_version} that opens an event file.
std::string encode_file_version_event(double wall_time, const std::string& file_version = "brain.Event:2");
/// The serialized Event {wall_time, step, summary {value {tag, simple_value}}} of one scalar.
std::string encode_scalar_event(double wall_time, int64_t step, const std::string& tag, float simple_value);

/// The fields of an Event that troupe writes, as decoded from its bytes.
struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  /// (tag, simple_value) of each Summary.Value.
  std::vector<std::pair<std::string, float>> values;
};
/// Decodes an Event (unknown fields skipped); throws MetricsError on malformed protobuf.
Event decode_event(std::string_view bytes);

}  // namespace troupe::metrics
