// Python's text for the values that extra_repr() prints (repr of float, bool, str, tuple), so that
// printed modules match PyTorch's exactly: py_float(1e-05) == "1e-05", py_float(0.5) == "0.5",
// py_float(2.0) == "2.0", py_bool(true) == "True", py_tuple({2, 5}) == "(2, 5)".
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace troupe::util {

/// repr(float(v)) in Python 3: the shortest round-tripping digits, in exponent form when the
/// decimal exponent is < -4 or >= 16.
inline std::string py_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string s(buf, res.ptr);  // "-d.ddde+XX"
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  const size_t epos = s.find('e');
  const int exp10 = std::stoi(s.substr(epos + 1));
  std::string digits = s.substr(0, epos);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  const int ndig = static_cast<int>(digits.size());
  if (exp10 < -4 || exp10 >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (ndig > 1) out += "." + digits.substr(1);
    const int ae = std::abs(exp10);
    out += exp10 < 0 ? "e-" : "e+";
    if (ae < 10) out += "0";
    return out + std::to_string(ae);
  }
  const int decpt = exp10 + 1;  // digits before the decimal point
  std::string out;
  if (decpt <= 0) {
    out = "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  } else if (decpt >= ndig) {
    out = digits + std::string(static_cast<size_t>(decpt - ndig), '0') + ".0";
  } else {
    out = digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
  }
  return sign + out;
}

/// str(bool) in Python: "True" / "False".
inline std::string py_bool(bool b) { return b ? "True" : "False"; }

/// repr(str) in Python for plain ASCII text without quotes: 'text'.
inline std::string py_str(const std::string& s) { return "'" + s + "'"; }

/// repr(tuple of ints) in Python: "(2, 5)", "(5,)", "()".
inline std::string py_tuple(const std::vector<int64_t>& v) {
  std::string out = "(";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(v[i]);
  }
  if (v.size() == 1) out += ",";
  return out + ")";
}

/// Python's text of a number passed as an option, for error messages: an integral value as the int a
/// Python user writes ("-1"), any other as repr(float) ("-0.1", "1.5", "1e-05", "nan").
inline std::string py_number(double v) {
  if (std::isfinite(v) && v == std::trunc(v) && std::abs(v) < 1e16)
    return std::to_string(static_cast<long long>(v));
  return py_float(v);
}

}  // namespace troupe::util
