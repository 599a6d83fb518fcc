// TFRecord framing and the hand-encoded Event protobuf: CRC-32C against its published check values,
// the masking formula, a scalar Event byte for byte, frames read back with their CRCs checked, and
// corrupt or truncated files rejected naming the record and byte.
#include <gtest/gtest.h>

#include <cstring>

#include <troupe/metrics/record.h>
#include <troupe/metrics/tfrecord.h>

using namespace troupe::metrics;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const MetricsError& e) {
    return e.what();
  }
  return "(no error)";
}
uint32_t le32(const std::string& s, size_t at) {
  uint32_t v;
  std::memcpy(&v, s.data() + at, 4);
  return v;
}
}  // namespace

TEST(Crc32c, PublishedCheckValues) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);                      // the CRC catalogue's check value
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);            // RFC 3720 B.4: 32 bytes of zeros
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);          // RFC 3720 B.4: 32 bytes of 0xff
  EXPECT_EQ(crc32c(""), 0u);
}

TEST(Crc32c, MaskIsRotateThenAdd) {
  for (std::string s : {"", "a", "123456789", "brain.Event:2"}) {
    const uint32_t c = crc32c(s);
    EXPECT_EQ(masked_crc32c(s), static_cast<uint32_t>(((c >> 15) | (c << 17)) + 0xa282ead8u)) << s;
  }
}

TEST(TfRecord, FrameLayout) {
  const std::string data = "hello";
  const std::string f = tfrecord_frame(data);
  ASSERT_EQ(f.size(), 8 + 4 + data.size() + 4);
  uint64_t len;
  std::memcpy(&len, f.data(), 8);
  EXPECT_EQ(len, data.size());
  EXPECT_EQ(le32(f, 8), masked_crc32c(f.substr(0, 8)));
  EXPECT_EQ(f.substr(12, 5), data);
  EXPECT_EQ(le32(f, 17), masked_crc32c(data));
}

TEST(TfRecord, SplitReadsBackEveryRecord) {
  const std::string a = "", b = std::string(300, 'x'), c = encode_scalar_event(1, 2, "t", 3);
  auto recs = tfrecord_split(tfrecord_frame(a) + tfrecord_frame(b) + tfrecord_frame(c));
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[0], a);
  EXPECT_EQ(recs[1], b);
  EXPECT_EQ(recs[2], c);
}

TEST(TfRecord, CorruptOrTruncatedIsRejected) {
  const std::string one = tfrecord_frame("abc");
  std::string bytes = one + tfrecord_frame("defg");
  std::string bad = bytes;
  bad[one.size() + 13] ^= 1;  // a data byte of record 1
  EXPECT_EQ(error_of([&] { tfrecord_split(bad, "f"); }), "[tfrecord] f: record 1 at byte 19: data CRC does not match");
  bad = bytes;
  bad[one.size()] ^= 1;  // record 1's length
  EXPECT_EQ(error_of([&] { tfrecord_split(bad, "f"); }), "[tfrecord] f: record 1 at byte 19: length CRC does not match");
  EXPECT_EQ(error_of([&] { tfrecord_split(bytes.substr(0, bytes.size() - 2), "f"); }),
            "[tfrecord] f: record 1 at byte 19: length 4 runs past the end (18 bytes left)");
  EXPECT_EQ(error_of([&] { tfrecord_split(bytes.substr(0, one.size() + 5), "f"); }),
            "[tfrecord] f: record 1 at byte 19: truncated header (5 bytes left)");
}

TEST(Event, ScalarEventBytes) {
  // Event{wall_time 1.5, step 3, summary{value{tag "a", simple_value 2}}} in protobuf's wire format.
  const std::string want("\x09\x00\x00\x00\x00\x00\x00\xF8\x3F"  // 1: double 1.5
                         "\x10\x03"                              // 2: varint 3
                         "\x2A\x0A"                              // 5: Summary, 10 bytes
                         "\x0A\x08"                              //   1: Value, 8 bytes
                         "\x0A\x01" "a"                          //     1: tag "a"
                         "\x15\x00\x00\x00\x40",                 //     2: float 2.0
                         23);
  EXPECT_EQ(encode_scalar_event(1.5, 3, "a", 2.0f), want);
}

TEST(Event, FileVersionEventBytes) {
  const std::string want("\x09\x00\x00\x00\x00\x00\x00\x00\x40"  // 1: double 2.0
                         "\x1A\x0D" "brain.Event:2",             // 3: string, 13 bytes
                         24);
  EXPECT_EQ(encode_file_version_event(2.0), want);
}

TEST(Event, DecodeInvertsEncode) {
  for (int64_t step : {int64_t{0}, int64_t{1}, int64_t{300}, int64_t{1} << 40, int64_t{-5}}) {
    Event ev = decode_event(encode_scalar_event(1723456789.25, step, std::string(200, 'q'), -0.1f));
    EXPECT_EQ(ev.wall_time, 1723456789.25);
    EXPECT_EQ(ev.step, step);
    ASSERT_EQ(ev.values.size(), 1u);
    EXPECT_EQ(ev.values[0].first, std::string(200, 'q'));
    EXPECT_EQ(ev.values[0].second, -0.1f);
  }
  Event fv = decode_event(encode_file_version_event(7));
  EXPECT_EQ(fv.file_version, "brain.Event:2");
  EXPECT_TRUE(fv.values.empty());
  EXPECT_EQ(error_of([] { decode_event(std::string("\x2A\x05\x0A", 3)); }),
            "[decode_event] length 5 past the end at byte 2");
}
