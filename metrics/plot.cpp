// Training-curve plots: the series of each tag, an SVG writer, and the gnuplot route to PNG.
#include <troupe/metrics/plot.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>
#include <sstream>

#include <unistd.h>

namespace troupe::metrics {

namespace fs = std::filesystem;

namespace {

// Tableau's ten colours (matplotlib's default cycle).
const char* const kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

// One curve: a run's records of one tag from one rank.
struct Curve {
  int series = 0;  // index into the legend's series (run, rank)
  std::vector<double> step, wall, value;
};

struct Series {
  std::string label;
  std::string color;
};

// The tags to draw, their curves, and the legend.
struct Layout {
  std::vector<std::string> tags;
  std::map<std::string, std::vector<Curve>> curves;
  std::vector<Series> series;
};

Layout collect(const std::vector<RunLog>& runs, const PlotOptions& options) {
  Layout L;
  std::map<std::pair<size_t, int>, int> series_of;  // (run, rank) -> legend index
  std::map<std::string, bool> seen;
  for (size_t ri = 0; ri < runs.size(); ++ri) {
    const auto& run = runs[ri];
    std::map<int, bool> ranks;
    double t0 = INFINITY;
    for (const auto& r : run.records) {
      ranks[r.rank] = true;
      t0 = std::min(t0, r.wall_time);
    }
    for (const auto& [rank, _] : ranks) {
      int idx = static_cast<int>(L.series.size());
      series_of[{ri, rank}] = idx;
      std::string label = run.name + (ranks.size() > 1 ? " (rank " + std::to_string(rank) + ")" : "");
      L.series.push_back({label, kColors[idx % 10]});
    }
    std::map<std::pair<std::string, int>, Curve> by_key;
    for (const auto& r : run.records) {
      if (!seen.count(r.tag)) {
        seen[r.tag] = true;
        if (options.tags.empty()) L.tags.push_back(r.tag);
      }
      Curve& c = by_key[{r.tag, r.rank}];
      c.series = series_of[{ri, r.rank}];
      c.step.push_back(static_cast<double>(r.step));
      c.wall.push_back(r.wall_time - t0);
      c.value.push_back(r.value);
    }
    for (auto& [key, c] : by_key) L.curves[key.first].push_back(std::move(c));
  }
  if (!options.tags.empty()) {
    for (const auto& t : options.tags) {
      if (!seen.count(t)) {
        std::string known;
        for (const auto& [k, _] : seen) known += (known.empty() ? "" : ", ") + k;
        throw MetricsError("[plot] no records of tag '" + t + "' (the runs have: " + (known.empty() ? "none" : known) + ")");
      }
      L.tags.push_back(t);
    }
  }
  if (L.tags.empty()) throw MetricsError("[plot] nothing to draw: the runs hold no records");
  return L;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string tick_label(double v) {
  if (std::fabs(v) < 1e-12) v = 0;
  char buf[32];
  // plain digits between 0.001 and a million ("15000", "0.25"), exponents outside
  std::snprintf(buf, sizeof buf, v == 0 || (std::fabs(v) >= 1e-3 && std::fabs(v) < 1e6) ? "%.6g" : "%.3g", v);
  return buf;
}

// Sorts a curve's points by x (steps may arrive out of order when ranks are gathered).
std::vector<std::pair<double, double>> points(const std::vector<double>& x, const std::vector<double>& y) {
  std::vector<std::pair<double, double>> p;
  for (size_t i = 0; i < x.size(); ++i) p.emplace_back(x[i], y[i]);
  std::stable_sort(p.begin(), p.end(), [](auto& a, auto& b) { return a.first < b.first; });
  return p;
}

// At most the lowest and highest point of each pixel column, in x order, once a curve has more points
// than two a column: a long run's curve keeps its envelope and the file stays small. Non-finite points
// are kept (they break the line).
template <typename PX>
std::vector<std::pair<double, double>> thin(std::vector<std::pair<double, double>> p, const PX& px) {
  std::vector<std::pair<double, double>> out;
  size_t i = 0;
  while (i < p.size()) {
    if (!std::isfinite(p[i].first) || !std::isfinite(p[i].second)) {
      out.push_back(p[i++]);
      continue;
    }
    const double col = std::floor(px(p[i].first));
    size_t j = i, lo = i, hi = i;
    while (j < p.size() && std::isfinite(p[j].first) && std::isfinite(p[j].second) && std::floor(px(p[j].first)) == col) {
      if (p[j].second < p[lo].second) lo = j;
      if (p[j].second > p[hi].second) hi = j;
      ++j;
    }
    out.push_back(p[std::min(lo, hi)]);
    if (lo != hi) out.push_back(p[std::max(lo, hi)]);
    i = j;
  }
  return out;
}

// Range of the finite values, widened when empty or flat.
std::pair<double, double> range(const std::vector<const std::vector<double>*>& vs) {
  double lo = INFINITY, hi = -INFINITY;
  for (auto* v : vs)
    for (double d : *v)
      if (std::isfinite(d)) {
        lo = std::min(lo, d);
        hi = std::max(hi, d);
      }
  if (!std::isfinite(lo)) return {0, 1};
  if (lo == hi) {
    const double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    return {lo - pad, hi + pad};
  }
  return {lo, hi};
}

// One panel at (x0, y0) of size w x h: frame, grid, ticks, curves.
void panel(std::ostringstream& o, double x0, double y0, double w, double h, const std::string& title,
           const std::string& xlabel, const std::vector<Curve>& curves, const std::vector<Series>& series, bool by_wall) {
  std::vector<const std::vector<double>*> xs, ys;
  for (const auto& c : curves) {
    xs.push_back(by_wall ? &c.wall : &c.step);
    ys.push_back(&c.value);
  }
  // plain variables, not structured bindings: the lambdas below capture them (clang < 16 cannot capture
  // a structured binding, and scripts/fuzz.sh builds with clang-14)
  double xlo, xhi, ylo, yhi;
  std::tie(xlo, xhi) = range(xs);
  std::tie(ylo, yhi) = range(ys);
  const auto xt = nice_ticks(xlo, xhi), yt = nice_ticks(ylo, yhi);
  xlo = std::min(xlo, xt.front());
  xhi = std::max(xhi, xt.back());
  ylo = std::min(ylo, yt.front());
  yhi = std::max(yhi, yt.back());
  auto px = [&](double x) { return x0 + (x - xlo) / (xhi - xlo) * w; };
  auto py = [&](double y) { return y0 + h - (y - ylo) / (yhi - ylo) * h; };

  o << "<text x=\"" << num(x0 + w / 2) << "\" y=\"" << num(y0 - 8) << "\" text-anchor=\"middle\" font-weight=\"bold\">"
    << xml_escape(title) << "</text>\n";
  o << "<g stroke=\"#e5e5e5\" stroke-width=\"1\">\n";
  for (double t : xt) o << "<line x1=\"" << num(px(t)) << "\" y1=\"" << num(y0) << "\" x2=\"" << num(px(t)) << "\" y2=\"" << num(y0 + h) << "\"/>\n";
  for (double t : yt) o << "<line x1=\"" << num(x0) << "\" y1=\"" << num(py(t)) << "\" x2=\"" << num(x0 + w) << "\" y2=\"" << num(py(t)) << "\"/>\n";
  o << "</g>\n";
  o << "<rect x=\"" << num(x0) << "\" y=\"" << num(y0) << "\" width=\"" << num(w) << "\" height=\"" << num(h)
    << "\" fill=\"none\" stroke=\"#333\"/>\n";
  o << "<g font-size=\"11\" fill=\"#333\">\n";
  for (double t : xt)
    o << "<text x=\"" << num(px(t)) << "\" y=\"" << num(y0 + h + 14) << "\" text-anchor=\"middle\">" << tick_label(t) << "</text>\n";
  for (double t : yt)
    o << "<text x=\"" << num(x0 - 5) << "\" y=\"" << num(py(t) + 4) << "\" text-anchor=\"end\">" << tick_label(t) << "</text>\n";
  o << "<text x=\"" << num(x0 + w / 2) << "\" y=\"" << num(y0 + h + 30) << "\" text-anchor=\"middle\">" << xlabel << "</text>\n";
  o << "</g>\n";
  for (const auto& c : curves) {
    const auto pts = thin(points(by_wall ? c.wall : c.step, c.value), px);
    const std::string& color = series[c.series].color;
    // A polyline per run of finite values (NaN and infinities break the line).
    std::string seg;
    int seg_n = 0;
    auto emit = [&] {
      if (seg_n == 1) {
        o << "<circle cx=\"" << seg.substr(0, seg.find(',')) << "\" cy=\"" << seg.substr(seg.find(',') + 1)
          << "\" r=\"2.5\" fill=\"" << color << "\"/>\n";
      } else if (seg_n > 1) {
        o << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"" << seg << "\"/>\n";
      }
      seg.clear();
      seg_n = 0;
    };
    for (const auto& [x, y] : pts) {
      if (!std::isfinite(x) || !std::isfinite(y)) {
        emit();
        continue;
      }
      if (seg_n) seg += ' ';
      seg += num(px(x)) + "," + num(py(y));
      ++seg_n;
    }
    emit();
  }
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return {lo};
  const double raw = (hi - lo) / std::max(1, target - 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;  // the one of 1, 2, 5, 10 times mag nearest to raw in ratio
  for (double m : {2.0, 5.0, 10.0})
    if (std::fabs(std::log(m * mag / raw)) < std::fabs(std::log(step / raw))) step = m * mag;
  std::vector<double> t;
  const double first = std::floor(lo / step) * step;
  for (double v = first; v <= hi + step * 1e-9; v += step) t.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
  if (t.back() < hi - step * 1e-9) t.push_back(t.back() + step);
  if (t.size() < 2) t.push_back(t.back() + step);
  return t;
}

RunLog load_run(const std::string& path) {
  RunLog run;
  const fs::path p(path);
  run.name = p.filename() == "metrics.jsonl" && p.has_parent_path() && !p.parent_path().filename().empty()
                 ? p.parent_path().filename().string()
                 : p.stem().string();
  run.records = read_jsonl(path);
  return run;
}

std::string render_svg(const std::vector<RunLog>& runs, const PlotOptions& options) {
  const Layout L = collect(runs, options);
  const double W = 960, pw = 380, ph = 200, left = 80, gap = 110, top_title = options.title.empty() ? 0 : 30;
  const double legend_h = 22.0 * static_cast<double>((L.series.size() + 3) / 4) + 10;
  const double row_h = ph + 75, top = top_title + legend_h + 30;
  const double H = top + row_h * static_cast<double>(L.tags.size()) - 25;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(W) << "\" height=\"" << num(H) << "\" viewBox=\"0 0 "
    << num(W) << " " << num(H) << "\" font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  if (!options.title.empty())
    o << "<text x=\"" << num(W / 2) << "\" y=\"22\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">"
      << xml_escape(options.title) << "</text>\n";
  for (size_t i = 0; i < L.series.size(); ++i) {  // legend: four entries a row
    const double x = left + 220.0 * static_cast<double>(i % 4), y = top_title + 20 + 22.0 * static_cast<double>(i / 4);
    o << "<line x1=\"" << num(x) << "\" y1=\"" << num(y - 4) << "\" x2=\"" << num(x + 24) << "\" y2=\"" << num(y - 4)
      << "\" stroke=\"" << L.series[i].color << "\" stroke-width=\"3\"/>\n";
    o << "<text x=\"" << num(x + 30) << "\" y=\"" << num(y) << "\">" << xml_escape(L.series[i].label) << "</text>\n";
  }
  for (size_t i = 0; i < L.tags.size(); ++i) {
    const auto& tag = L.tags[i];
    const double y = top + row_h * static_cast<double>(i);
    const auto& curves = L.curves.at(tag);
    panel(o, left, y, pw, ph, tag + " by step", "step", curves, L.series, false);
    panel(o, left + pw + gap, y, pw, ph, tag + " by wall time", "wall time (s)", curves, L.series, true);
  }
  o << "</svg>\n";
  return o.str();
}

namespace {

// A gnuplot single-quoted string ('' inside).
std::string gp_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

void write_png(const std::vector<RunLog>& runs, const std::string& path, const PlotOptions& options) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0)
    throw MetricsError("[plot] writing '" + path + "' (PNG) needs gnuplot, which is not on PATH; write .svg instead");
  const Layout L = collect(runs, options);
  char tmpl[] = "/tmp/troupe-plot-XXXXXX";
  if (!mkdtemp(tmpl)) throw MetricsError(std::string("[plot] cannot make a temporary directory: ") + std::strerror(errno));
  const fs::path dir(tmpl);
  std::ostringstream gp;
  const int rows = static_cast<int>(L.tags.size());
  gp << "set terminal pngcairo size 1200," << 300 * rows + (options.title.empty() ? 0 : 40) << " font 'DejaVu Sans,9'\n";
  gp << "set output " << gp_quote(path) << "\n";
  gp << "set grid\nset key outside right top\n";
  gp << "set multiplot layout " << rows << ",2" << (options.title.empty() ? "" : " title " + gp_quote(options.title)) << "\n";
  int file_no = 0;
  for (const auto& tag : L.tags) {
    for (int by_wall = 0; by_wall < 2; ++by_wall) {
      gp << "set title " << gp_quote(tag + (by_wall ? " by wall time" : " by step")) << " noenhanced\n";
      gp << "set xlabel \"" << (by_wall ? "wall time (s)" : "step") << "\"\n";
      std::string plot = "plot ";
      bool first = true;
      for (const auto& c : L.curves.at(tag)) {
        const fs::path data = dir / ("d" + std::to_string(file_no++) + ".txt");
        std::ofstream out(data);
        for (const auto& [x, y] : points(by_wall ? c.wall : c.step, c.value))
          if (std::isfinite(x) && std::isfinite(y)) out << x << ' ' << y << '\n';
        plot += std::string(first ? "" : ", ") + gp_quote(data.string()) + " using 1:2 with lines lw 1.5 lc rgb '" +
                L.series[c.series].color + "' title " + gp_quote(L.series[c.series].label) + " noenhanced";
        first = false;
      }
      gp << plot << "\n";
    }
  }
  gp << "unset multiplot\n";
  const fs::path script = dir / "plot.gp", log = dir / "gnuplot.log";
  std::ofstream(script) << gp.str();
  const int rc = std::system(("gnuplot " + shell_quote(script.string()) + " >" + shell_quote(log.string()) + " 2>&1").c_str());
  std::string msg;
  if (rc != 0) {
    std::ifstream in(log);
    std::getline(in, msg);
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) msg = line;  // gnuplot's last line says what failed
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (rc != 0) throw MetricsError("[plot] gnuplot failed writing '" + path + "': " + msg);
}

}  // namespace

void save_plot(const std::vector<RunLog>& runs, const std::string& path, const PlotOptions& options) {
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".png") return write_png(runs, path, options);
  if (ext != ".svg") throw MetricsError("[plot] output '" + path + "' must end in .svg or .png");
  const std::string svg = render_svg(runs, options);
  std::ofstream out(path, std::ios::binary);
  if (!out) throw MetricsError("[plot] cannot open '" + path + "' for writing: " + std::strerror(errno));
  out << svg;
  out.close();
  if (!out) throw MetricsError("[plot] cannot write '" + path + "': " + std::strerror(errno));
}

}  // namespace troupe::metrics
