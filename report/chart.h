#pragma once
// Generic charts as inline SVG and the self-contained HTML page that holds them (no scripts or
// styles fetched). The profiler's sweep report (report/html.cpp) and the labs' plots (labs/)
// both use the page; the labs draw their curves and bars with these charts.
#include <string>
#include <vector>

namespace bertlab {

std::string html_escape(const std::string& s);

struct ChartSeries {
  std::string label;
  std::vector<double> x, y;  // same length; for bar charts x is unused (one y per group)
};

enum class Scale { linear, log };

// A dashed horizontal line across the plot at `y`, labelled at its right end (e.g. 1.0x, where
// one side starts losing, or a figure to compare with). The y axis always includes it.
struct RefLine {
  double y = 0;
  std::string label;
};

struct LineChart {
  std::string title, x_label, y_label;
  std::vector<ChartSeries> series;
  Scale x_scale = Scale::linear, y_scale = Scale::linear;
  std::vector<RefLine> refs = {};
};
// Lines with a circle (class "pt") per point and a legend; log axes skip non-positive values.
// The x axis spans the data (a log axis is not widened to whole decades) and, with at most 10
// distinct x values, is ticked at exactly those values.
std::string line_chart_svg(const LineChart& chart);

struct BarChart {
  std::string title, y_label;
  std::vector<std::string> groups;   // one cluster of bars per group
  std::vector<ChartSeries> series;   // one bar per series in each cluster: y[group]
  // Where the bars start. 0: bars from zero, the axis includes zero. Anything else (e.g. 1 for
  // a ratio): bars go up or down from there and the axis is fitted to the data and the
  // baseline, so that differences around it are visible.
  double baseline = 0;
  std::vector<RefLine> refs = {};
};
// Grouped bars (class "seg") with a legend.
std::string bar_chart_svg(const BarChart& chart);

// The chart and its numbers: <div class="row"> holding the SVG and, beside it, a table of every
// value drawn (a line chart: one row per x, one column per series; bars: one row per series,
// one column per group) and the reference lines. What the labs' pages use.
std::string line_chart_html(const LineChart& chart);
std::string bar_chart_html(const BarChart& chart);

// A whole page: `body` holds `charts` SVG charts (class "chart"). Inline scripts record on load
// how many laid out with marks (data-charts-rendered) and how many script errors happened
// (data-js-errors, on <body>), which the headless Chromium tests read.
std::string html_page(const std::string& title, const std::string& body, size_t charts);

}  // namespace bertlab
