// Inline SVG line and bar charts and the page that holds them (report/chart.h).
#include "report/chart.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <limits>

namespace bertlab {

namespace {

const char* series_color(size_t i) {
  // Ten hues far apart (matplotlib's tab10), so that ten categories stay distinct.
  static const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                 "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
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
      // Decades inside the axis; 1-2-5 steps when fewer than two decades fall inside.
      for (double e = std::floor(std::log10(lo)); e <= std::ceil(std::log10(hi)); ++e)
        for (double m : {1.0, 2.0, 5.0}) t.push_back(m * std::pow(10, e));
      std::vector<double> decades, inside;
      for (double v : t)
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) (std::abs(std::log10(v) - std::round(std::log10(v))) < 1e-9 ? decades : inside).push_back(v);
      if (decades.size() >= 2) return decades;
      inside.insert(inside.end(), decades.begin(), decades.end());
      std::sort(inside.begin(), inside.end());
      return inside;
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
    // Fitted to the data (S 4-32 is not drawn on 1-100): a margin of 6% of the span, in log space.
    const double f = std::max(1.08, std::pow(hi / lo, 0.06));
    a.lo = lo / f;
    a.hi = hi * f;
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

// The reference lines: dashed, labelled above their right end.
std::string ref_lines(const Frame& f, const Axis& y, const std::vector<RefLine>& refs) {
  std::string s;
  for (const RefLine& r : refs) {
    if (!std::isfinite(r.y) || (y.scale == Scale::log && r.y <= 0)) continue;
    const double py = f.top + (1 - y.frac(r.y)) * f.plot_h();
    s += fmt::format("<line class=\"ref\" x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#333\" "
                     "stroke-dasharray=\"6 4\"/><text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\" class=\"ref\">{5}</text>\n",
                     f.left, f.left + f.plot_w(), py, f.left + f.plot_w() - 4, py - 4, html_escape(r.label));
  }
  return s;
}

void add_refs(std::vector<double>& values, const std::vector<RefLine>& refs) {
  for (const RefLine& r : refs) values.push_back(r.y);
}

std::string number(double v) { return std::isfinite(v) ? fmt::format("{:.4g}", v) : std::string(); }

std::string refs_rows(const std::vector<RefLine>& refs, size_t columns) {
  std::string s;
  for (const RefLine& r : refs)
    s += fmt::format("<tr class=\"ref\"><td>{} (dashed line)</td><td colspan=\"{}\">{}</td></tr>\n",
                     html_escape(r.label), columns, number(r.y));
  return s;
}

std::string numbers_table(const LineChart& c) {
  std::vector<double> xs;
  for (const auto& se : c.series) xs.insert(xs.end(), se.x.begin(), se.x.end());
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  std::string s = fmt::format("<div class=\"numbers\"><table>\n<tr><th>{}</th>", html_escape(c.x_label));
  for (const auto& se : c.series) s += fmt::format("<th>{}</th>", html_escape(se.label));
  s += "</tr>\n";
  for (double x : xs) {
    s += fmt::format("<tr><td>{}</td>", number(x));
    for (const auto& se : c.series) {
      std::string cell;
      for (size_t k = 0; k < std::min(se.x.size(), se.y.size()); ++k)
        if (se.x[k] == x) cell = number(se.y[k]);
      s += fmt::format("<td>{}</td>", cell);
    }
    s += "</tr>\n";
  }
  return s + refs_rows(c.refs, c.series.size()) + fmt::format("<caption>{}</caption></table></div>\n", html_escape(c.y_label));
}

std::string numbers_table(const BarChart& c) {
  std::string s = "<div class=\"numbers\"><table>\n<tr><th></th>";
  for (const auto& g : c.groups) s += fmt::format("<th>{}</th>", html_escape(g));
  s += "</tr>\n";
  for (size_t i = 0; i < c.series.size(); ++i) {
    // A series left out of this chart (every value NaN) gets no row.
    if (std::none_of(c.series[i].y.begin(), c.series[i].y.end(), [](double v) { return std::isfinite(v); })) continue;
    s += fmt::format("<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td>", series_color(i),
                     html_escape(c.series[i].label));
    for (size_t g = 0; g < c.groups.size(); ++g)
      s += fmt::format("<td>{}</td>", g < c.series[i].y.size() ? number(c.series[i].y[g]) : std::string());
    s += "</tr>\n";
  }
  return s + refs_rows(c.refs, c.groups.size()) + fmt::format("<caption>{}</caption></table></div>\n", html_escape(c.y_label));
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
  add_refs(ys, c.refs);
  const Axis x = make_axis(xs, c.x_scale, false), y = make_axis(ys, c.y_scale, false);
  // A few distinct x values (kernel sizes, core counts) are the ticks themselves.
  std::vector<double> x_ticks;
  for (double v : xs)
    if (std::isfinite(v) && (c.x_scale == Scale::linear || v > 0)) x_ticks.push_back(v);
  std::sort(x_ticks.begin(), x_ticks.end());
  x_ticks.erase(std::unique(x_ticks.begin(), x_ticks.end()), x_ticks.end());
  if (x_ticks.empty() || x_ticks.size() > 10) x_ticks = x.ticks();
  auto px = [&](double v) { return f.left + x.frac(v) * f.plot_w(); };
  auto py = [&](double v) { return f.top + (1 - y.frac(v)) * f.plot_h(); };
  auto usable = [](double v, Scale sc) { return std::isfinite(v) && (sc == Scale::linear || v > 0); };
  std::string s = svg_open("line", c.title, f.w, f.h);
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n",
                   f.left, f.top, f.plot_w(), f.plot_h());
  s += y_axis(f, y, c.y_label);
  for (double v : x_ticks)
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
  return s + ref_lines(f, y, c.refs) + legend(f, c.series) + "</svg>\n";
}

std::string bar_chart_svg(const BarChart& c) {
  const Frame f;
  std::vector<double> ys;
  for (const auto& s : c.series) ys.insert(ys.end(), s.y.begin(), s.y.end());
  add_refs(ys, c.refs);
  ys.push_back(c.baseline);
  const Axis y = make_axis(ys, Scale::linear, c.baseline == 0);
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
      const double v = c.series[i].y[g], y0 = py(c.baseline), y1 = py(v);
      s += fmt::format("<rect class=\"seg\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\">"
                       "<title>{} / {}: {:g}</title></rect>\n",
                       gx + 0.1 * group_w + i * bar_w, std::min(y0, y1), bar_w, std::abs(y0 - y1),
                       series_color(i), html_escape(c.groups[g]), html_escape(c.series[i].label), v);
    }
  }
  s += fmt::format("<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#888\"/>\n", f.left,
                   f.left + f.plot_w(), py(c.baseline));
  return s + ref_lines(f, y, c.refs) + legend(f, c.series) + "</svg>\n";
}

std::string line_chart_html(const LineChart& c) {
  return "<div class=\"row\">\n" + line_chart_svg(c) + numbers_table(c) + "</div>\n";
}

std::string bar_chart_html(const BarChart& c) {
  return "<div class=\"row\">\n" + bar_chart_svg(c) + numbers_table(c) + "</div>\n";
}

std::string html_page(const std::string& title, const std::string& body, size_t charts) {
  return fmt::format(R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{0}</title>
<script>
// Counts script errors (data-js-errors on <body>, set on load), for the headless test.
window.chartErrors = 0;
window.addEventListener('error', function () {{ window.chartErrors++; }});
</script>
<style>
body {{ font-family: sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; margin: 0 1.5em 1em 0; font-size: 13px; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: right; }}
td:first-child {{ text-align: left; }}
.row {{ display: flex; flex-wrap: wrap; align-items: flex-start; }}
svg text {{ font-size: 12px; }} .tick {{ fill: #555; }} .grid {{ stroke: #eee; }}
.skipped {{ color: #a00; }}
.numbers {{ max-height: 380px; overflow-y: auto; margin-top: 20px; }}
caption {{ caption-side: bottom; font-size: 12px; color: #555; }}
.swatch {{ display: inline-block; width: 10px; height: 10px; margin-right: 4px; }}
tr.ref td {{ color: #333; font-style: italic; }} text.ref {{ fill: #333; }}
td.wrong {{ color: #a00; }} td.right {{ color: #070; }}
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
  document.body.setAttribute('data-js-errors', String(window.chartErrors));
}});
</script>
</body></html>
)",
                     html_escape(title), charts, body);
}

}  // namespace bertlab
