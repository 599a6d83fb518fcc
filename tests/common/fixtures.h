// Loader for the PyTorch reference fixtures in tests/fixtures/*.txt (written by
// tests/fixtures/gen_fixtures.py; the format and every record name are listed in tests/fixtures/README.md),
// and a tensor comparison for gtest.
//
//   auto fx = troupe::testing::Fixtures::load("broadcast.txt");
//   troupe::Tensor a = fx.get("a_0"), b = fx.get("b_0");
//   EXPECT_TRUE(troupe::testing::tensors_close(a + b, fx.get("add_0"), 1e-6, 1e-6));
//
// Parsing needs only troupe::empty and Tensor::data_ptr<T>; tensors_close reads the tensors through their
// sizes/strides directly (it calls no tensor op except .cpu() for a tensor that is not on the CPU).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tensor/ops.h"
#include "tensor/tensor.h"

namespace troupe::testing {

/// The fixture directory: $TROUPE_FIXTURES_DIR when set and non-empty, else the compile definition
/// TROUPE_FIXTURES_DIR (a string literal), else "tests/fixtures" (relative to the working directory).
std::string fixtures_dir();

/// The records of one fixture file, parsed and validated when loaded.
struct Fixtures {
  /// Parses `file`, a name relative to fixtures_dir() (or an absolute path). Throws std::runtime_error
  /// naming the file, the line and the problem: missing file, bad header, unknown dtype, wrong number
  /// of values, a value that does not parse or does not fit its dtype, a duplicate record.
  /// A printing file (`@print` / `@expect` blocks) loads too: its `<name>_value` records are kept.
  static Fixtures load(const std::string& file);

  /// A new tensor (its own storage, requires_grad false) holding the record `name`; throws
  /// std::runtime_error naming the file when there is no such record.
  troupe::Tensor get(const std::string& name) const;
  bool has(const std::string& name) const;
  /// Record names in file order.
  std::vector<std::string> names() const;

  // ---- access that needs no tensor op (handy for the int64 `_params` records)
  troupe::ScalarType dtype(const std::string& name) const;
  std::vector<int64_t> shape(const std::string& name) const;
  /// The values, row-major, as int64 (floating values are truncated; for the integer records).
  std::vector<int64_t> ints(const std::string& name) const;
  /// The values, row-major, as double (exact for every dtype but int64 beyond 2^53).
  std::vector<double> doubles(const std::string& name) const;
  /// The full path the records were read from.
  const std::string& path() const;

  struct Record {
    troupe::ScalarType dtype = troupe::kFloat32;
    std::vector<int64_t> sizes;
    std::vector<double> fvalues;   // floating dtypes (float16/bfloat16/float32 values are exact floats)
    std::vector<int64_t> ivalues;  // int64/int32/uint8/bool
    int line = 0;                  // line of the header
  };

 private:
  struct Data {
    std::string path;
    std::vector<std::string> order;
    std::map<std::string, Record> records;
  };
  const Record& record(const std::string& name) const;
  std::shared_ptr<const Data> data_;
  friend struct FixtureParser;
};

/// Builds a tensor from a parsed record (what Fixtures::get returns).
troupe::Tensor make_tensor(const Fixtures::Record& r);

/// True when `actual` and `expected` have the same shape and every element satisfies
/// |actual - expected| <= atol + rtol * |expected| (computed in double; exactly for two integral
/// tensors). NaN equals NaN; an infinity equals only the same infinity. The dtypes may differ (values
/// are compared, so a float16 result can be checked against a float32 record) unless check_dtype is
/// true. On failure the message gives the number of mismatches, the largest absolute difference, its
/// index and both values, and the first mismatch.
::testing::AssertionResult tensors_close(const troupe::Tensor& actual, const troupe::Tensor& expected,
                                         double rtol, double atol, bool check_dtype = false);

/// One case of printing.txt: the tensor (built as by Fixtures::get; requires_grad is NOT set on it, the
/// flags below say what PyTorch's tensor had) and the exact lines of str(t) in PyTorch.
struct PrintCase {
  std::string name;
  troupe::Tensor value;
  std::vector<std::string> lines;
  bool requires_grad = false;
  /// The autograd node's name, e.g. "MulBackward0", or empty for a leaf.
  std::string grad_fn;
  /// The lines joined with '\n' (no trailing newline): the whole of str(t).
  std::string text() const;
};

/// Reads a printing file (`@print` blocks, see tests/fixtures/README.md); errors as in Fixtures::load.
std::vector<PrintCase> load_print_cases(const std::string& file);

/// Parses a dtype name of the fixture format ("float32", "bfloat16", ...); throws std::invalid_argument.
troupe::ScalarType parse_dtype_name(const std::string& s);
/// The fixture format's name of a dtype.
const char* fixture_dtype_name(troupe::ScalarType t);

}  // namespace troupe::testing
