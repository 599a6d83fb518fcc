// troupe-plot: training curves from metrics.jsonl files (SummaryWriter's), one row of panels per tag,
// by step and by wall time, several runs overlaid.
//
//   troupe-plot RUN.jsonl... [-o curves.svg|curves.png] [--tags a,b,...] [--title TEXT]
//
// Writes SVG itself; PNG through gnuplot when it is installed. Any bad input (a missing file, a
// malformed line, an unwritable output) ends the program with one line on stderr and exit status 1.
#include <troupe/metrics/plot.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace {

int usage(const std::string& why, int code) {
  std::fprintf(code ? stderr : stdout,
               "%s%susage: troupe-plot RUN.jsonl... [-o OUT.svg|OUT.png] [--tags a,b,...] [--title TEXT]\n",
               why.empty() ? "" : ("troupe-plot: " + why).c_str(), why.empty() ? "" : "\n");
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> inputs;
  std::string out = "curves.svg";
  troupe::metrics::PlotOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string& into) {
      if (i + 1 >= argc) return false;
      into = argv[++i];
      return true;
    };
    if (a == "-o" || a == "--output") {
      if (!value(out)) return usage("missing value after " + a, 2);
    } else if (a == "--title") {
      if (!value(options.title)) return usage("missing value after " + a, 2);
    } else if (a == "--tags") {
      std::string list;
      if (!value(list)) return usage("missing value after " + a, 2);
      for (size_t at = 0; at <= list.size();) {
        size_t end = list.find(',', at);
        if (end == std::string::npos) end = list.size();
        if (end > at) options.tags.push_back(list.substr(at, end - at));
        at = end + 1;
      }
    } else if (a == "-h" || a == "--help") {
      return usage("", 0);
    } else if (a.size() > 1 && a[0] == '-') {
      return usage("unknown option " + a, 2);
    } else {
      inputs.push_back(a);
    }
  }
  if (inputs.empty()) return usage("no metrics file given", 2);
  try {
    std::vector<troupe::metrics::RunLog> runs;
    size_t records = 0;
    for (const auto& path : inputs) {
      runs.push_back(troupe::metrics::load_run(path));
      records += runs.back().records.size();
    }
    troupe::metrics::save_plot(runs, out, options);
    std::printf("troupe-plot: %zu records of %zu run%s -> %s\n", records, runs.size(), runs.size() == 1 ? "" : "s",
                out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe-plot: %s\n", e.what());
    return 1;
  }
  return 0;
}
