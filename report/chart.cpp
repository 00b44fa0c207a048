// Inline SVG line and bar charts and the page that holds them (report/chart.h).
#include "report/chart.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <limits>

namespace bertlab {

namespace {

const char* series_color(size_t i) {
  static const char* colors[] = {"#1f4e9c", "#e4572e", "#2a9d8f", "#f3a712", "#7b3fa0",
                                 "#8ab17d", "#d62828", "#264653", "#a05a2c", "#9a9a9a"};
  return colors[i % (sizeof(colors) / sizeof(colors[0]))];
}

struct Axis {
  double lo = 0, hi = 1;
  Scale scale = Scale::linear;
  double map(double v) const { return scale == Scale::log ? std::log10(v) : v; }
  // Position in [0, 1] along the axis.
  double frac(double v) const { return (map(v) - map(lo)) / (map(hi) - map(lo)); }
  std::vector<double> ticks() const {
    std::vector<double> t;
    if (scale == Scale::log) {
      for (double e = std::floor(std::log10(lo)); e <= std::ceil(std::log10(hi)) + 1e-9; ++e) t.push_back(std::pow(10, e));
      return t;
    }
    const double span = hi - lo, raw = span / 5, mag = std::pow(10, std::floor(std::log10(raw)));
    const double step = raw / mag < 2 ? 2 * mag : raw / mag < 5 ? 5 * mag : 10 * mag;
    for (double v = std::ceil(lo / step) * step; v <= hi + 1e-9 * span; v += step) t.push_back(v);
    return t;
  }
};

// Data range of the values usable on this scale, widened to nice ends.
Axis make_axis(const std::vector<double>& values, Scale scale, bool from_zero) {
  Axis a;
  a.scale = scale;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double v : values) {
    if (!std::isfinite(v) || (scale == Scale::log && v <= 0)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  if (!std::isfinite(lo)) lo = hi = scale == Scale::log ? 1 : 0;
  if (scale == Scale::log) {
    a.lo = std::pow(10, std::floor(std::log10(lo)));
    a.hi = std::pow(10, std::ceil(std::log10(hi) + 1e-9));
    if (a.hi <= a.lo) a.hi = a.lo * 10;
    return a;
  }
  if (from_zero) lo = std::min(lo, 0.0), hi = std::max(hi, 0.0);
  if (hi == lo) hi = lo + 1;
  const double pad = from_zero ? 0 : 0.05 * (hi - lo);
  a.lo = lo - (lo == 0 ? 0 : pad);
  a.hi = hi + 0.05 * (hi - lo);
  return a;
}

std::string svg_open(const std::string& kind, const std::string& title, double w, double h) {
  return fmt::format(
      "<svg class=\"chart\" data-chart=\"{0}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{1}\" "
      "height=\"{2}\" viewBox=\"0 0 {1} {2}\" role=\"img\">\n<title>{3}</title>\n"
      "<text x=\"{4}\" y=\"16\" text-anchor=\"middle\" font-weight=\"bold\">{3}</text>\n",
      kind, w, h, html_escape(title), w / 2);
}

struct Frame {
  double w = 640, h = 380, left = 70, right = 20, top = 30, bottom = 50, legend_w = 170;
  double plot_w() const { return w - left - right - legend_w; }
  double plot_h() const { return h - top - bottom; }
};

std::string y_axis(const Frame& f, const Axis& y, const std::string& label) {
  std::string s;
  for (double v : y.ticks()) {
    const double py = f.top + (1 - y.frac(v)) * f.plot_h();
    s += fmt::format("<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" class=\"grid\" stroke=\"#eee\"/>"
                     "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\" class=\"tick\">{5:g}</text>\n",
                     f.left, f.left + f.plot_w(), py, f.left - 6, py + 4, v);
  }
  s += fmt::format("<text transform=\"translate(16 {}) rotate(-90)\" text-anchor=\"middle\" class=\"axis\">{}</text>\n",
                   f.top + f.plot_h() / 2, html_escape(label));
  return s;
}

std::string legend(const Frame& f, const std::vector<ChartSeries>& series) {
  std::string s;
  for (size_t i = 0; i < series.size(); ++i) {
    const double x = f.w - f.legend_w + 10, y = f.top + 10 + 20 * i;
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/>"
                     "<text x=\"{}\" y=\"{}\">{}</text>\n",
                     x, y - 10, series_color(i), x + 18, y, html_escape(series[i].label));
  }
  return s;
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::string line_chart_svg(const LineChart& c) {
  const Frame f;
  std::vector<double> xs, ys;
  for (const auto& s : c.series) {
    xs.insert(xs.end(), s.x.begin(), s.x.end());
    ys.insert(ys.end(), s.y.begin(), s.y.end());
  }
  const Axis x = make_axis(xs, c.x_scale, false), y = make_axis(ys, c.y_scale, false);
  auto px = [&](double v) { return f.left + x.frac(v) * f.plot_w(); };
  auto py = [&](double v) { return f.top + (1 - y.frac(v)) * f.plot_h(); };
  auto usable = [](double v, Scale sc) { return std::isfinite(v) && (sc == Scale::linear || v > 0); };
  std::string s = svg_open("line", c.title, f.w, f.h);
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n",
                   f.left, f.top, f.plot_w(), f.plot_h());
  s += y_axis(f, y, c.y_label);
  for (double v : x.ticks())
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" class=\"tick\">{:g}</text>\n", px(v),
                     f.top + f.plot_h() + 16, v);
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"axis\">{}</text>\n",
                   f.left + f.plot_w() / 2, f.h - 10, html_escape(c.x_label));
  for (size_t i = 0; i < c.series.size(); ++i) {
    const auto& se = c.series[i];
    std::string pts, dots;
    for (size_t k = 0; k < std::min(se.x.size(), se.y.size()); ++k) {
      if (!usable(se.x[k], c.x_scale) || !usable(se.y[k], c.y_scale)) continue;
      pts += fmt::format("{:.1f},{:.1f} ", px(se.x[k]), py(se.y[k]));
      dots += fmt::format("<circle class=\"pt\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"><title>{}: ({:g}, {:g})</title></circle>\n",
                          px(se.x[k]), py(se.y[k]), series_color(i), html_escape(se.label), se.x[k], se.y[k]);
    }
    s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n{}", pts,
                     series_color(i), dots);
  }
  return s + legend(f, c.series) + "</svg>\n";
}

std::string bar_chart_svg(const BarChart& c) {
  const Frame f;
  std::vector<double> ys;
  for (const auto& s : c.series) ys.insert(ys.end(), s.y.begin(), s.y.end());
  const Axis y = make_axis(ys, Scale::linear, true);
  auto py = [&](double v) { return f.top + (1 - y.frac(v)) * f.plot_h(); };
  std::string s = svg_open("bar", c.title, f.w, f.h);
  s += y_axis(f, y, c.y_label);
  const double group_w = f.plot_w() / std::max<size_t>(1, c.groups.size());
  const double bar_w = 0.8 * group_w / std::max<size_t>(1, c.series.size());
  for (size_t g = 0; g < c.groups.size(); ++g) {
    const double gx = f.left + g * group_w;
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" class=\"tick\">{}</text>\n",
                     gx + group_w / 2, f.top + f.plot_h() + 16, html_escape(c.groups[g]));
    for (size_t i = 0; i < c.series.size(); ++i) {
      if (g >= c.series[i].y.size() || !std::isfinite(c.series[i].y[g])) continue;
      const double v = c.series[i].y[g], y0 = py(std::max(0.0, y.lo)), y1 = py(v);
      s += fmt::format("<rect class=\"seg\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\">"
                       "<title>{} / {}: {:g}</title></rect>\n",
                       gx + 0.1 * group_w + i * bar_w, std::min(y0, y1), bar_w, std::abs(y0 - y1),
                       series_color(i), html_escape(c.groups[g]), html_escape(c.series[i].label), v);
    }
  }
  s += fmt::format("<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#888\"/>\n", f.left,
                   f.left + f.plot_w(), py(std::max(0.0, y.lo)));
  return s + legend(f, c.series) + "</svg>\n";
}

std::string html_page(const std::string& title, const std::string& body, size_t charts) {
  return fmt::format(R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{0}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; margin: 0 1.5em 1em 0; font-size: 13px; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: right; }}
td:first-child {{ text-align: left; }}
.row {{ display: flex; flex-wrap: wrap; align-items: flex-start; }}
svg text {{ font-size: 12px; }} .tick {{ fill: #555; }} .grid {{ stroke: #eee; }}
.skipped {{ color: #a00; }}
</style></head>
<body data-charts-expected="{1}">
{2}
<script>
// Records how many charts laid out with a non-empty box and marks, for the headless test.
window.addEventListener('load', function () {{
  var n = 0;
  document.querySelectorAll('svg.chart').forEach(function (svg) {{
    var box = svg.getBBox();
    if (box.width > 0 && box.height > 0 && svg.querySelectorAll('rect.seg, circle.pt').length > 0) n++;
  }});
  document.body.setAttribute('data-charts-rendered', String(n));
}});
</script>
</body></html>
)",
                     html_escape(title), charts, body);
}

}  // namespace bertlab
