// Plots: nice tick spacing, run names from paths, the SVG's panels, curves and legend for overlaid runs
// and ranks, and the errors for an empty plot, an unknown tag and an unwritable or unknown output.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <troupe/metrics/plot.h>

#include <cstdlib>

using namespace troupe::metrics;
namespace fs = std::filesystem;

namespace {
int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const MetricsError& e) {
    return e.what();
  }
  return "(no error)";
}
RunLog make_run(const std::string& name, int ranks, int steps) {
  RunLog r{name, {}};
  for (int rank = 0; rank < ranks; ++rank)
    for (int s = 0; s < steps; ++s) {
      r.records.push_back({"loss", s, std::exp(-0.3 * s) + rank, 100.0 + s * 0.5, rank});
      if (rank == 0 && s % 5 == 4) r.records.push_back({"accuracy", s, 0.5 + 0.01 * s, 100.0 + s * 0.5, 0});
    }
  return r;
}
}  // namespace

TEST(Plot, NiceTicks) {
  auto t = nice_ticks(0, 1);  // raw spacing 0.25: 0.2 is nearer than 0.5
  ASSERT_EQ(t.size(), 6u);
  EXPECT_DOUBLE_EQ(t[1], 0.2);
  EXPECT_DOUBLE_EQ(t.back(), 1.0);
  EXPECT_EQ(nice_ticks(3, 97), (std::vector<double>{0, 20, 40, 60, 80, 100}));  // raw 23.5 -> 20
  t = nice_ticks(-0.013, 0.021);  // raw 0.0085 -> 0.01, widened to whole ticks
  ASSERT_EQ(t.size(), 6u);
  EXPECT_NEAR(t.front(), -0.02, 1e-12);
  EXPECT_NEAR(t.back(), 0.03, 1e-12);
  EXPECT_EQ(nice_ticks(5, 5).size(), 1u);
}

TEST(Plot, RunNamesFromPaths) {
  fs::path dir = fs::temp_directory_path() / ("troupe_plot_" + std::to_string(::getpid())) / "digits_mlp";
  fs::create_directories(dir);
  std::ofstream(dir / "metrics.jsonl") << to_json({"a", 1, 2, 3, 0}) << "\n";
  std::ofstream(dir / "other.jsonl") << to_json({"a", 1, 2, 3, 0}) << "\n";
  EXPECT_EQ(load_run((dir / "metrics.jsonl").string()).name, "digits_mlp");
  EXPECT_EQ(load_run((dir / "other.jsonl").string()).name, "other");
  EXPECT_EQ(load_run((dir / "metrics.jsonl").string()).records.size(), 1u);
  fs::remove_all(dir.parent_path());
}

TEST(Plot, SvgHasTwoPanelsPerTagAndACurvePerSeries) {
  std::vector<RunLog> runs = {make_run("mlp", 1, 20), make_run("ddp", 2, 20)};
  const std::string svg = render_svg(runs, PlotOptions{{}, "digits"});
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(count(svg, ">loss by step<"), 1);
  EXPECT_EQ(count(svg, ">loss by wall time<"), 1);
  EXPECT_EQ(count(svg, ">accuracy by step<"), 1);
  EXPECT_EQ(count(svg, "<rect x="), 4);  // four panel frames
  // loss: mlp, ddp rank 0, ddp rank 1; accuracy: mlp, ddp rank 0 -- each in both panels
  EXPECT_EQ(count(svg, "<polyline"), 2 * (3 + 2));
  EXPECT_EQ(count(svg, ">mlp<"), 1);
  EXPECT_EQ(count(svg, ">ddp (rank 0)<"), 1);
  EXPECT_EQ(count(svg, ">ddp (rank 1)<"), 1);
  EXPECT_EQ(count(svg, ">digits<"), 1);
  EXPECT_EQ(count(svg, "stroke=\"#1f77b4\" stroke-width=\"1.5\""), 4);  // mlp's colour: 2 tags x 2 panels
}

TEST(Plot, TagsOptionSelectsAndOrders) {
  std::vector<RunLog> runs = {make_run("a", 1, 10)};
  PlotOptions o;
  o.tags = {"accuracy"};
  const std::string svg = render_svg(runs, o);
  EXPECT_EQ(count(svg, " by step<"), 1);
  EXPECT_EQ(count(svg, ">accuracy by step<"), 1);
  o.tags = {"nope"};
  EXPECT_EQ(error_of([&] { render_svg(runs, o); }), "[plot] no records of tag 'nope' (the runs have: accuracy, loss)");
  EXPECT_EQ(error_of([] { render_svg({RunLog{"empty", {}}}); }), "[plot] nothing to draw: the runs hold no records");
}

TEST(Plot, NonFiniteValuesBreakTheLine) {
  RunLog r{"r", {}};
  for (int s = 0; s < 7; ++s) r.records.push_back({"x", s, s == 3 ? NAN : s == 5 ? INFINITY : 1.0 * s, 1.0 * s, 0});
  const std::string svg = render_svg({r});
  // points 0-2 a line, 4 a dot, 6 a dot -- in both panels
  EXPECT_EQ(count(svg, "<polyline"), 2);
  EXPECT_EQ(count(svg, "<circle"), 4);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}

TEST(Plot, LongCurvesKeepTheirEnvelopePerPixelColumn) {
  RunLog r{"long", {}};
  for (int s = 0; s < 100000; ++s) r.records.push_back({"x", s, s % 2 ? 1.0 : -1.0, 1.0 * s, 0});
  const std::string svg = render_svg({r});
  // 380-pixel panels: at most two points a column, and both extremes drawn
  const size_t start = svg.find("points=\""), end = svg.find('"', start + 8);
  const std::string pts = svg.substr(start + 8, end - start - 8);
  EXPECT_LE(count(pts, ","), 2 * 381);
  EXPECT_GE(count(pts, ","), 2 * 370);
  EXPECT_LT(svg.size(), 60000u);
}

TEST(Plot, SaveErrors) {
  std::vector<RunLog> runs = {make_run("a", 1, 3)};
  EXPECT_EQ(error_of([&] { save_plot(runs, "/nonexistent_dir_troupe/x.svg"); }),
            "[plot] cannot open '/nonexistent_dir_troupe/x.svg' for writing: No such file or directory");
  EXPECT_EQ(error_of([&] { save_plot(runs, "curves.pdf"); }), "[plot] output 'curves.pdf' must end in .svg or .png");
  fs::path out = fs::temp_directory_path() / ("troupe_plot_" + std::to_string(::getpid()) + ".svg");
  save_plot(runs, out.string());
  std::ifstream in(out);
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first.rfind("<svg", 0), 0u);
  fs::remove(out);
}

TEST(Plot, PngThroughGnuplot) {
  std::vector<RunLog> runs = {make_run("a", 2, 30)};
  fs::path out = fs::temp_directory_path() / ("troupe_plot_" + std::to_string(::getpid()) + ".png");
  // Without gnuplot on PATH: one error saying so.
  const std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", "/nonexistent_troupe", 1);
  const std::string err = error_of([&] { save_plot(runs, out.string()); });
  ::setenv("PATH", path.c_str(), 1);
  EXPECT_EQ(err, "[plot] writing '" + out.string() + "' (PNG) needs gnuplot, which is not on PATH; write .svg instead");
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot is not installed";
  save_plot(runs, out.string(), PlotOptions{{}, "it's \"quoted\""});
  std::ifstream in(out, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  EXPECT_EQ(std::string(magic, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_GT(fs::file_size(out), 5000u);
  fs::remove(out);
}

TEST(Plot, TickLabelsArePlainNumbers) {
  RunLog r{"r", {}};
  for (int s = 0; s <= 20000; s += 1000) r.records.push_back({"x", s, 0.25 * s, 1.0 * s, 0});
  const std::string svg = render_svg({r});
  EXPECT_NE(svg.find(">15000<"), std::string::npos);
  EXPECT_EQ(svg.find("e+04"), std::string::npos);
}
