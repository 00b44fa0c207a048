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

struct LineChart {
  std::string title, x_label, y_label;
  std::vector<ChartSeries> series;
  Scale x_scale = Scale::linear, y_scale = Scale::linear;
};
// Lines with a circle (class "pt") per point and a legend; log axes skip non-positive values.
std::string line_chart_svg(const LineChart& chart);

struct BarChart {
  std::string title, y_label;
  std::vector<std::string> groups;   // one cluster of bars per group
  std::vector<ChartSeries> series;   // one bar per series in each cluster: y[group]
};
// Grouped bars (class "seg") with a legend, from zero.
std::string bar_chart_svg(const BarChart& chart);

// A whole page: `body` holds `charts` SVG charts (class "chart"). An inline script records on
// load how many laid out with marks (data-charts-rendered), which the headless Chromium tests read.
std::string html_page(const std::string& title, const std::string& body, size_t charts);

}  // namespace bertlab
