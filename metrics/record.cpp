// JSON lines and CSV forms of a Record: writing, and a small parser for the flat objects to_json writes.
#include <troupe/metrics/record.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>

namespace troupe::metrics {

std::string format_double(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

namespace {

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

// A cursor over one line; every failure names the column (1-based) and what was expected.
struct Parser {
  std::string_view s;
  size_t i = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw MetricsError(what + " at column " + std::to_string(i + 1));
  }
  void skip_ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) ++i;
  }
  void expect(char c, const std::string& after) {
    skip_ws();
    if (i >= s.size() || s[i] != c) fail(std::string("expected '") + c + "' " + after);
    ++i;
  }
  std::string string_value() {
    skip_ws();
    if (i >= s.size() || s[i] != '"') fail("expected a string");
    ++i;
    std::string out;
    while (true) {
      if (i >= s.size()) fail("unterminated string");
      char c = s[i++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i >= s.size()) fail("unterminated escape");
      char e = s[i++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          if (i + 4 > s.size()) fail("short \\u escape");
          unsigned cp = 0;
          auto r = std::from_chars(s.data() + i, s.data() + i + 4, cp, 16);
          if (r.ptr != s.data() + i + 4) fail("bad \\u escape");
          i += 4;
          // UTF-8 of a BMP code point (surrogate pairs are not expected in tags).
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default: fail(std::string("bad escape \\") + e);
      }
    }
  }
  double number_value(const std::string& key) {
    skip_ws();
    for (const char* word : {"NaN", "Infinity", "-Infinity"}) {
      size_t n = std::strlen(word);
      if (s.substr(i, n) == word) {
        i += n;
        return word[0] == 'N' ? std::nan("") : word[0] == '-' ? -INFINITY : INFINITY;
      }
    }
    size_t start = i;
    while (i < s.size() && (std::strchr("+-.eE", s[i]) || (s[i] >= '0' && s[i] <= '9'))) ++i;
    double v = 0;
    auto r = std::from_chars(s.data() + start, s.data() + i, v);
    if (start == i || r.ec != std::errc() || r.ptr != s.data() + i) {
      i = start;
      fail("expected a number for \"" + key + "\"");
    }
    return v;
  }
  void skip_value() {  // an unknown key's value: a string, a number, true/false/null
    skip_ws();
    if (i < s.size() && s[i] == '"') {
      string_value();
      return;
    }
    for (const char* word : {"true", "false", "null"}) {
      size_t n = std::strlen(word);
      if (s.substr(i, n) == word) {
        i += n;
        return;
      }
    }
    number_value("?");
  }
};

}  // namespace

std::string to_json(const Record& r) {
  std::string out = "{\"tag\":";
  append_json_string(out, r.tag);
  out += ",\"step\":" + std::to_string(r.step);
  out += ",\"value\":" + format_double(r.value);
  out += ",\"wall_time\":" + format_double(r.wall_time);
  out += ",\"rank\":" + std::to_string(r.rank) + "}";
  return out;
}

Record parse_json(std::string_view line) {
  Parser p{line};
  Record r;
  bool has_tag = false, has_step = false, has_value = false;
  p.expect('{', "at the start of a record");
  p.skip_ws();
  if (p.i < line.size() && line[p.i] == '}') p.fail("empty record: expected \"tag\", \"step\" and \"value\"");
  while (true) {
    std::string key = p.string_value();
    p.expect(':', "after key \"" + key + "\"");
    if (key == "tag") {
      r.tag = p.string_value();
      has_tag = true;
    } else if (key == "step") {
      double v = p.number_value(key);
      if (v != std::floor(v) || std::fabs(v) > 9.007199254740992e15) p.fail("\"step\" must be an integer");
      r.step = static_cast<int64_t>(v);
      has_step = true;
    } else if (key == "value") {
      r.value = p.number_value(key);
      has_value = true;
    } else if (key == "wall_time") {
      r.wall_time = p.number_value(key);
    } else if (key == "rank") {
      // checked before the cast: NaN or a value out of int's range would be undefined behaviour (found by
      // scripts/fuzz.sh, tests/fuzz/corpus/metrics_jsonl/bad-rank-nan)
      double v = p.number_value(key);
      if (!(v >= 0 && v <= 2147483647.0) || v != std::floor(v)) p.fail("\"rank\" must be a non-negative integer");
      r.rank = static_cast<int>(v);
    } else {
      p.skip_value();
    }
    p.skip_ws();
    if (p.i < line.size() && line[p.i] == ',') {
      ++p.i;
      continue;
    }
    p.expect('}', "or ',' after the value of \"" + key + "\"");
    break;
  }
  p.skip_ws();
  if (p.i != line.size()) p.fail("unexpected text after the record");
  if (!has_tag || !has_step || !has_value)
    throw MetricsError(std::string("record lacks ") + (!has_tag ? "\"tag\"" : !has_step ? "\"step\"" : "\"value\""));
  return r;
}

std::vector<Record> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw MetricsError("[metrics] cannot open '" + path + "': " + std::strerror(errno));
  std::vector<Record> out;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      out.push_back(parse_json(line));
    } catch (const MetricsError& e) {
      throw MetricsError("[metrics] " + path + ":" + std::to_string(n) + ": " + e.what());
    }
  }
  if (in.bad()) throw MetricsError("[metrics] error reading '" + path + "'");
  return out;
}

const char* csv_header() { return "wall_time,step,rank,tag,value"; }

std::string to_csv(const Record& r) {
  std::string tag = r.tag;
  if (tag.find_first_of(",\"\n\r") != std::string::npos) {
    std::string q = "\"";
    for (char c : tag) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    tag = q + "\"";
  }
  return format_double(r.wall_time) + "," + std::to_string(r.step) + "," + std::to_string(r.rank) + "," + tag + "," +
         format_double(r.value);
}

}  // namespace troupe::metrics
