// graph(), inlined_graph(), code() and code_with_constants() against PyTorch 1.13's output for the same
// traced modules (tests/fixtures/jit.txt, written by tests/fixtures/gen_jit.py).
//
// Graphs are compared as data flow: every node that computes (aten ops, prim::CallMethod) with its
// arguments spelt out (constants as `value:type`, attribute reads as `self.fc1.weight`, lists as `[..]`,
// computed values numbered in order of appearance) and its output types, then the return. So the op
// sequence, every argument, every attribute path and every traced type/shape must match; value names
// and where constants and attribute reads sit need not (PyTorch takes names from Python's variables).
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <sstream>

#include <troupe/jit/jit.h>
#include <troupe/tensor/random.h>

#include "common/text_cases.h"
#include "jit_models.h"

namespace troupe::jit {
namespace {

const std::map<std::string, std::string>& torch_cases() {
  static const auto cases = troupe::testing::load_text_cases("jit.txt");
  return cases;
}
const std::string& torch_case(const std::string& name) {
  auto it = torch_cases().find(name);
  if (it == torch_cases().end()) throw std::runtime_error("jit.txt has no case " + name);
  return it->second;
}

// Splits "a, b(c, d), e" at top-level commas.
std::vector<std::string> split_top(const std::string& s) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (char c : s) {
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
      continue;
    }
    if (c == ' ' && cur.empty()) continue;
    cur += c;
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// The data-flow form of a printed graph (see the file comment).
std::string dataflow(const std::string& graph) {
  std::map<std::string, std::string> def;
  std::ostringstream os;
  int computed = 0;
  std::istringstream in(graph);
  std::string line, header;
  // the header may span lines up to "):"
  while (std::getline(in, line)) {
    header += line;
    if (line.size() >= 2 && line.compare(line.size() - 2, 2, "):") == 0) break;
  }
  const std::string params = header.substr(header.find('(') + 1, header.size() - header.find('(') - 3);
  int input_no = 0;
  for (const std::string& p : split_top(params)) {
    const size_t colon = p.find(" : ");
    const std::string name = p.substr(0, colon);
    const std::string type = p.substr(colon + 3);
    if (input_no == 0) {
      def[name] = "self";
      os << "self : " << type << "\n";
    } else {
      def[name] = "%in" + std::to_string(input_no);
      os << def[name] << " : " << type << "\n";
    }
    ++input_no;
  }
  static const std::regex node_re(R"(^  (.*) = ([a-zA-Z0-9_:]+)(\[(.*)\])?\((.*)\)$)");
  while (std::getline(in, line)) {
    if (line.rfind("  return (", 0) == 0) {
      std::string inner = line.substr(10, line.size() - 11);
      os << "return (";
      auto vals = split_top(inner);
      for (size_t i = 0; i < vals.size(); ++i) os << (i ? ", " : "") << def.at(vals[i]);
      os << ")\n";
      continue;
    }
    std::smatch m;
    if (!std::regex_match(line, m, node_re)) throw std::runtime_error("unparsed graph line: " + line);
    std::vector<std::pair<std::string, std::string>> outs;
    for (const std::string& o : split_top(m[1].str())) {
      const size_t colon = o.find(" : ");
      outs.emplace_back(o.substr(0, colon), o.substr(colon + 3));
    }
    const std::string kind = m[2].str();
    const std::string attrs = m[4].str();
    std::vector<std::string> args;
    for (const std::string& a : split_top(m[5].str())) args.push_back(def.at(a));
    if (kind == "prim::Constant") {
      const std::string value = attrs.empty() ? "None" : attrs.substr(attrs.find('=') + 1);
      def[outs[0].first] = value + ":" + outs[0].second;
    } else if (kind == "prim::GetAttr") {
      const std::string name = attrs.substr(attrs.find('"') + 1, attrs.rfind('"') - attrs.find('"') - 1);
      def[outs[0].first] = args[0] + "." + name;
    } else if (kind == "prim::ListConstruct") {
      std::string l = "[";
      for (size_t i = 0; i < args.size(); ++i) l += (i ? ", " : "") + args[i];
      def[outs[0].first] = l + "]";
    } else {
      os << kind << (attrs.empty() ? "" : "[" + attrs + "]") << "(";
      for (size_t i = 0; i < args.size(); ++i) os << (i ? ", " : "") << args[i];
      os << ") ->";
      for (auto& [name, type] : outs) {
        def[name] = "%v" + std::to_string(++computed);
        os << " " << def[name] << " : " << type;
      }
      os << "\n";
    }
  }
  return os.str();
}

// The troupe text with `.graph()`'s trailing newline dropped (the fixture cases have none).
std::string chomp(std::string s) {
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

ScriptModulePtr traced_mlp() {
  default_generator().manual_seed(0);
  auto net = std::make_shared<troupe::testing::MLP>();
  return trace(net, randn({16, 32}));
}

ScriptModulePtr traced_conv(bool train) {
  default_generator().manual_seed(0);
  auto net = std::make_shared<troupe::testing::Conv>();
  net->train(train);
  return trace(net, randn({2, 1, 8, 8}), /*check_trace=*/!train);
}

TEST(Graph, DataflowFormReadsTheFixture) {
  // the normal form itself, on PyTorch's fc1 graph: so a broken parser cannot pass the tests below
  EXPECT_EQ(dataflow(torch_case("mlp_fc1_graph")),
            "self : __torch__.torch.nn.modules.linear.Linear\n"
            "%in1 : Float(16, 32, strides=[32, 1], requires_grad=0, device=cpu)\n"
            "aten::linear(%in1, self.weight, self.bias) -> %v1 : Float(16, 64, strides=[64, 1], requires_grad=1, device=cpu)\n"
            "return (%v1)\n");
}

TEST(Graph, MlpMatchesPyTorch) {
  auto t = traced_mlp();
  EXPECT_EQ(dataflow(t->graph()), dataflow(torch_case("mlp_graph"))) << t->graph();
  EXPECT_EQ(dataflow(t->inlined_graph()), dataflow(torch_case("mlp_inlined_graph"))) << t->inlined_graph();
  auto fc1 = std::dynamic_pointer_cast<ScriptModule>(t->get_submodule("fc1"));
  ASSERT_TRUE(fc1);
  EXPECT_EQ(dataflow(fc1->graph()), dataflow(torch_case("mlp_fc1_graph"))) << fc1->graph();
}

TEST(Graph, MlpPrintedExactlyAsPyTorchWhereNamesAgree) {
  // the top graph's layout and names are PyTorch's, up to the numbers of unnamed values
  auto t = traced_mlp();
  std::string mine = std::regex_replace(chomp(t->graph()), std::regex("%[0-9]+"), "%N");
  std::string theirs = std::regex_replace(torch_case("mlp_graph"), std::regex("%[0-9]+"), "%N");
  EXPECT_EQ(mine, theirs);
}

TEST(Graph, ConvNetMatchesPyTorch) {
  auto t = traced_conv(false);
  EXPECT_EQ(dataflow(t->graph()), dataflow(torch_case("conv_graph"))) << t->graph();
  EXPECT_EQ(dataflow(t->inlined_graph()), dataflow(torch_case("conv_inlined_graph"))) << t->inlined_graph();
}

TEST(Graph, ConvNetInTrainModeMatchesPyTorch) {
  auto t = traced_conv(true);
  // One known difference: BatchNorm's num_batches_tracked += 1 adds the number 1 (an int constant) where
  // PyTorch adds a one-element Long tensor constant {1}; the result is the same.
  std::string theirs = dataflow(torch_case("conv_train_inlined_graph"));
  const std::string tensor_one = "{1}:Long(requires_grad=0, device=cpu)";
  ASSERT_NE(theirs.find(tensor_one), std::string::npos);
  theirs.replace(theirs.find(tensor_one), tensor_one.size(), "1:int");
  EXPECT_EQ(dataflow(t->inlined_graph()), theirs) << t->inlined_graph();
}

TEST(Code, MatchesPyTorch) {
  auto mlp = traced_mlp();
  EXPECT_EQ(chomp(mlp->code()), torch_case("mlp_code"));
  auto child = [](const ScriptModulePtr& t, const std::string& name) {
    return std::dynamic_pointer_cast<ScriptModule>(t->get_submodule(name));
  };
  EXPECT_EQ(chomp(child(mlp, "fc1")->code()), torch_case("mlp_fc1_code"));
  EXPECT_EQ(chomp(child(mlp, "fc2")->code()), torch_case("mlp_fc2_code"));
  auto conv = traced_conv(false);
  EXPECT_EQ(chomp(child(conv, "conv1")->code()), torch_case("conv_conv1_code"));
  EXPECT_EQ(chomp(child(conv, "drop")->code()), torch_case("conv_drop_code"));
}

TEST(Code, WithConstantsNamesTensorConstants) {
  struct Scaled : nn::Module {
    Scaled() { scale = troupe::tensor({2.0f, 3.0f}); }
    Tensor forward(const Tensor& x) override { return x * scale; }
    Tensor scale;
  };
  auto t = trace(std::make_shared<Scaled>(), randn({4, 2}));
  auto [code, constants] = t->code_with_constants();
  EXPECT_EQ(code, "def forward(self,\n    x: Tensor) -> Tensor:\n  return torch.mul(x, CONSTANTS.c0)\n");
  ASSERT_EQ(constants.size(), 1u);
  EXPECT_TRUE(equal(constants.at("c0"), troupe::tensor({2.0f, 3.0f})));
}

}  // namespace
}  // namespace troupe::jit
