// Record's JSON line and CSV forms: round trips (shortest doubles, NaN and infinities, escaped tags),
// and the errors of malformed lines and missing files, each naming the place.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include <troupe/metrics/record.h>

using namespace troupe::metrics;
namespace fs = std::filesystem;

namespace {
fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("troupe_metrics_record_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  return p;
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

TEST(Record, JsonLineIsExact) {
  Record r{"train/loss", 3, 0.25, 1723456789.5, 1};
  EXPECT_EQ(to_json(r), R"({"tag":"train/loss","step":3,"value":0.25,"wall_time":1723456789.5,"rank":1})");
  EXPECT_EQ(parse_json(to_json(r)), r);
}

TEST(Record, RoundTripsEveryDouble) {
  for (double v : {0.1, 1.0 / 3.0, -2.5e-300, 1e300, 123456789.123456789, std::numeric_limits<double>::denorm_min(),
                   -0.0}) {
    Record r{"x", -7, v, 1.7e9 + 0.123456, 0};
    Record back = parse_json(to_json(r));
    EXPECT_EQ(back.value, v) << to_json(r);
    EXPECT_EQ(std::signbit(back.value), std::signbit(v));
    EXPECT_EQ(back.wall_time, r.wall_time);
    EXPECT_EQ(back.step, -7);
  }
  EXPECT_EQ(format_double(0.1), "0.1");
  EXPECT_EQ(format_double(1e-5), "1e-05");
}

TEST(Record, NanAndInfinitiesAsPythonJson) {
  Record r{"x", 0, std::nan(""), 0, 0};
  EXPECT_NE(to_json(r).find("\"value\":NaN"), std::string::npos);
  EXPECT_TRUE(std::isnan(parse_json(to_json(r)).value));
  r.value = INFINITY;
  EXPECT_NE(to_json(r).find("\"value\":Infinity"), std::string::npos);
  EXPECT_EQ(parse_json(to_json(r)).value, INFINITY);
  r.value = -INFINITY;
  EXPECT_EQ(parse_json(to_json(r)).value, -INFINITY);
}

TEST(Record, TagsAreEscaped) {
  Record r{"a \"quoted\"\\tag\nwith\tcontrol\x01", 1, 2, 3, 0};
  const std::string line = to_json(r);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_NE(line.find("\\u0001"), std::string::npos);
  EXPECT_EQ(parse_json(line), r);
}

TEST(Record, KeysInAnyOrderAndOptionalOnes) {
  Record r = parse_json(R"( { "value" : 1.5 , "step": 4, "extra": true, "note": "x", "tag":"t" } )");
  EXPECT_EQ(r.tag, "t");
  EXPECT_EQ(r.step, 4);
  EXPECT_EQ(r.value, 1.5);
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.wall_time, 0);
}

TEST(Record, MalformedLinesSayWhatAndWhere) {
  EXPECT_EQ(error_of([] { parse_json("tag"); }), "expected '{' at the start of a record at column 1");
  EXPECT_EQ(error_of([] { parse_json(R"({"tag" "x"})"); }), "expected ':' after key \"tag\" at column 8");
  EXPECT_EQ(error_of([] { parse_json(R"({"tag":"x","step":"3","value":1})"); }),
            "expected a number for \"step\" at column 19");
  EXPECT_EQ(error_of([] { parse_json(R"({"tag":"x","step":1.5,"value":1})"); }), "\"step\" must be an integer at column 22");
  EXPECT_EQ(error_of([] { parse_json(R"({"tag":"x","value":1})"); }), "record lacks \"step\"");
  EXPECT_EQ(error_of([] { parse_json(R"({"tag":"x","step":1,"value":1} trailing)"); }),
            "unexpected text after the record at column 32");
  EXPECT_EQ(error_of([] { parse_json(R"({"tag":"x)"); }), "unterminated string at column 10");
  // found by the fuzzer: a rank that is not an int was cast anyway (undefined behaviour)
  EXPECT_EQ(error_of([] { parse_json(R"({"tag":"x","step":1,"value":1,"rank":NaN})"); }),
            "\"rank\" must be a non-negative integer at column 41");
  EXPECT_EQ(error_of([] { parse_json(R"({"tag":"x","step":1,"value":1,"rank":1e20})"); }),
            "\"rank\" must be a non-negative integer at column 42");
}

TEST(Record, ReadJsonlNamesFileAndLine) {
  fs::path p = scratch("bad.jsonl");
  {
    std::ofstream out(p);
    out << to_json({"a", 1, 1, 1, 0}) << "\n\n" << R"({"tag":"a","step":2,"value":})" << "\n";
  }
  EXPECT_EQ(error_of([&] { read_jsonl(p.string()); }),
            "[metrics] " + p.string() + ":3: expected a number for \"value\" at column 29");
  fs::remove(p);
  EXPECT_EQ(error_of([&] { read_jsonl(p.string()); }),
            "[metrics] cannot open '" + p.string() + "': No such file or directory");
}

TEST(Record, ReadJsonlSkipsBlankLines) {
  fs::path p = scratch("ok.jsonl");
  {
    std::ofstream out(p);
    out << to_json({"a", 1, 1, 1, 0}) << "\n  \n" << to_json({"b", 2, 2, 2, 1}) << "\n";
  }
  auto rs = read_jsonl(p.string());
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[1], (Record{"b", 2, 2, 2, 1}));
  fs::remove(p);
}

TEST(Record, CsvRowsQuoteOnlyWhenNeeded) {
  EXPECT_STREQ(csv_header(), "wall_time,step,rank,tag,value");
  EXPECT_EQ(to_csv({"train/loss", 3, 0.25, 10.5, 1}), "10.5,3,1,train/loss,0.25");
  EXPECT_EQ(to_csv({"a,b \"c\"", 3, 0.25, 10.5, 0}), "10.5,3,0,\"a,b \"\"c\"\"\",0.25");
}
