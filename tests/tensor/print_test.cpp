// Printing: t.str() and `os << t` must equal Python's str(t) in PyTorch 1.13 byte for byte, for every
// case of tests/fixtures/printing.txt (gen_fixtures.py) and tests/fixtures/print_extra.txt
// (gen_print_extra.py).
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "common/fixtures.h"
#include "tensor/autograd.h"
#include "tensor/backend.h"
#include "tensor/ops.h"

using namespace troupe;
using troupe::testing::load_print_cases;
using troupe::testing::PrintCase;

namespace {

/// The tensor PyTorch printed: the recorded value, with its requires_grad / grad_fn rebuilt.
Tensor rebuild(const PrintCase& c) {
  Tensor v = c.value;
  if (c.grad_fn.empty()) {
    if (c.requires_grad) v.requires_grad_(true);
    return v;
  }
  if (c.grad_fn != "MulBackward0") {
    ADD_FAILURE() << c.name << ": no recipe for grad_fn " << c.grad_fn;
    return v;
  }
  Tensor x = (v / 2).detach();
  x.requires_grad_(true);
  return x * scalar_tensor(2.0);  // Python's x * 2 multiplies by a wrapped tensor: MulBackward0
}

/// Runs every case of `file`; also prints a non-contiguous copy of each tensor of 2+ dims, which must
/// print the same.
void check_file(const std::string& file, size_t min_cases) {
  std::vector<PrintCase> cases = load_print_cases(file);
  ASSERT_GE(cases.size(), min_cases) << file;
  for (const auto& c : cases) {
    Tensor t = rebuild(c);
    const std::string want = c.text();
    EXPECT_EQ(t.str(), want) << file << ": case " << c.name;
    std::ostringstream os;
    os << t;
    EXPECT_EQ(os.str(), want) << file << ": case " << c.name << " (operator<<)";
    if (c.value.dim() >= 2 && c.grad_fn.empty() && !c.requires_grad) {
      Tensor nc = c.value.transpose(0, 1).contiguous().transpose(0, 1);
      ASSERT_FALSE(nc.is_contiguous() && c.value.size(0) > 1 && c.value.size(1) > 1) << c.name;
      EXPECT_EQ(nc.str(), want) << file << ": case " << c.name << " (non-contiguous)";
    }
  }
}

}  // namespace

TEST(Print, MatchesPyTorchPrintingFixtures) { check_file("printing.txt", 30); }

TEST(Print, MatchesPyTorchExtraCases) { check_file("print_extra.txt", 40); }

TEST(Print, SimpleCasesSpelledOut) {
  EXPECT_EQ(tensor({1.0, 2.0, 3.0}).str(), "tensor([1., 2., 3.])");
  EXPECT_EQ(tensor({1.5, -2.25}).str(), "tensor([ 1.5000, -2.2500])");
  EXPECT_EQ(tensor({1, 2, 3}).str(), "tensor([1, 2, 3])");
  EXPECT_EQ(tensor({true, false}).str(), "tensor([ True, False])");
  EXPECT_EQ(scalar_tensor(3.5).str(), "tensor(3.5000)");
  EXPECT_EQ(tensor({0.5, 0.25}, dtype(kFloat64)).str(), "tensor([0.5000, 0.2500], dtype=torch.float64)");
  EXPECT_EQ(zeros({2, 0}).str(), "tensor([], size=(2, 0))");
  EXPECT_EQ(zeros({0}, dtype(kInt64)).str(), "tensor([], dtype=torch.int64)");
  EXPECT_EQ(tensor({1.0, 2.0}).requires_grad_(true).str(), "tensor([1., 2.], requires_grad=True)");
  EXPECT_EQ(Tensor().str(), "[ Tensor (undefined) ]");
}

TEST(Print, ViewsAndOffsetsPrintTheirOwnElements) {
  Tensor a = arange(12.0).reshape({3, 4});
  EXPECT_EQ(a.select(0, 1).str(), "tensor([4., 5., 6., 7.])");
  EXPECT_EQ(a.select(1, 2).str(), "tensor([ 2.,  6., 10.])");
  EXPECT_EQ(a.t().str(),
            "tensor([[ 0.,  4.,  8.],\n"
            "        [ 1.,  5.,  9.],\n"
            "        [ 2.,  6., 10.],\n"
            "        [ 3.,  7., 11.]])");
  EXPECT_EQ(a.select(0, 2).select(0, 3).str(), "tensor(11.)");
  EXPECT_EQ(zeros({3}).expand({2, 3}).str(),
            "tensor([[0., 0., 0.],\n"
            "        [0., 0., 0.]])");
}

TEST(Print, GradFnSuffixUsesTheNodeName) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_(true);
  Tensor y = x * 2;
  EXPECT_EQ(y.str(), "tensor([2., 4.], grad_fn=<" + y.grad_fn()->name() + ">)");
  {
    NoGradGuard ng;
    EXPECT_EQ((x * 2).str(), "tensor([2., 4.])");
  }
  EXPECT_EQ(y.detach().str(), "tensor([2., 4.])");
}

TEST(Print, DefaultDtypeDecidesTheDtypeSuffix) {
  ScalarType prev = get_default_dtype();
  set_default_dtype(kFloat64);
  EXPECT_EQ(tensor({0.5}, dtype(kFloat64)).str(), "tensor([0.5000])");
  EXPECT_EQ(tensor({0.5}, dtype(kFloat32)).str(), "tensor([0.5000], dtype=torch.float32)");
  set_default_dtype(prev);
}

TEST(Print, CudaTensorsNameTheirDevice) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Tensor t = tensor({1.0, 2.0}).to(Device(kCUDA, 0));
  EXPECT_EQ(t.str(), "tensor([1., 2.], device='cuda:0')");
  Tensor d = tensor({1.0, 2.0}, dtype(kFloat64)).to(Device(kCUDA, 0));
  EXPECT_EQ(d.str(), "tensor([1., 2.], device='cuda:0', dtype=torch.float64)");
}
