// The sweep report: a self-contained HTML page with inline SVG charts (stacked category bars,
// one roofline per configuration) and the Markdown summary used by docs/. No scripts or
// styles are fetched; a small inline script only records that the charts laid out, for tests.
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "report/chart.h"
#include "report/sweep.h"

namespace bertlab {

namespace {

const char* category_color(ProfileCategory c) {
  static const char* colors[kProfileCategoryCount] = {
      "#1f4e9c", "#4f8fdc", "#7b3fa0", "#b48ad8", "#e4572e", "#f3a712", "#2a9d8f",
      "#8ab17d", "#e9c46a", "#a05a2c", "#d62828", "#264653", "#06d6a0", "#9a9a9a", "#d9d9d9"};
  return colors[static_cast<size_t>(c)];
}

std::string point_label(const SweepPoint& p) {
  std::string s;
  for (const SweepKey k : kSweepKeys) {
    if (!p.count(k)) continue;
    if (!s.empty()) s += " ";
    s += value_alone_in_label(k) ? p.at(k) : std::string(to_string(k)) + "=" + p.at(k);
  }
  return s;
}

// Stacked 100% bars, one per profiled configuration.
std::string category_bars_svg(const std::vector<SweepEntry>& entries) {
  const double label_w = 260, bar_w = 560, row_h = 26, top = 10, right_w = 110;
  std::vector<const SweepEntry*> rows;
  for (const auto& e : entries)
    if (e.profile) rows.push_back(&e);
  const double legend_top = top + rows.size() * row_h + 14;
  const int legend_cols = 4;
  const double legend_h = std::ceil(kProfileCategoryCount / double(legend_cols)) * 20;
  const double w = label_w + bar_w + right_w, h = legend_top + legend_h + 10;
  std::string s = fmt::format(
      "<svg class=\"chart\" data-chart=\"categories\" xmlns=\"http://www.w3.org/2000/svg\" "
      "width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" role=\"img\">\n"
      "<title>Share of the measured step by category</title>\n",
      w, h);
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto& p = *rows[r]->profile;
    const double y = top + r * row_h;
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"lbl\">{}</text>\n",
                     label_w - 8, y + 16, html_escape(point_label(rows[r]->point)));
    double x = label_w;
    for (size_t c = 0; c < p.categories.size(); ++c) {
      const auto& row = p.categories[c];
      const double share = std::max(0.0, row.seconds / p.step_seconds);
      const double width = share * bar_w;
      if (width <= 0) continue;
      s += fmt::format(
          "<rect class=\"seg\" x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\">"
          "<title>{}: {:.1f}% ({:.2f} ms)</title></rect>\n",
          x, y + 3, width, row_h - 6, category_color(static_cast<ProfileCategory>(c)),
          html_escape(row.label), 100 * share, row.seconds * 1e3);
      x += width;
    }
    s += fmt::format("<text x=\"{}\" y=\"{}\" class=\"lbl\">{:.1f} ms/step</text>\n",
                     label_w + bar_w + 8, y + 16, p.step_seconds * 1e3);
  }
  for (size_t c = 0; c < kProfileCategoryCount; ++c) {
    auto cat = static_cast<ProfileCategory>(c);
    const double x = 20 + (c % legend_cols) * (w - 20) / legend_cols;
    const double y = legend_top + (c / legend_cols) * 20;
    s += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/>"
        "<text x=\"{:.1f}\" y=\"{}\" class=\"leg\">{}</text>\n",
        x, y, category_color(cat), x + 16, y + 11, html_escape(category_label(cat)));
  }
  return s + "</svg>\n";
}

// Log-log roofline: the roof min(peak, bandwidth x intensity) and one point per node with FLOPs.
std::string roofline_svg(const Profile& p, const std::string& label) {
  const double w = 640, h = 400, left = 70, right = 20, top = 20, bottom = 50;
  double xmin = p.roof.ridge_intensity(), xmax = xmin, ymin = p.roof.peak_gflops, ymax = ymin;
  for (const auto& n : p.nodes) {
    if (n.flops <= 0 || n.bytes <= 0 || n.seconds <= 0) continue;
    xmin = std::min(xmin, n.intensity());
    xmax = std::max(xmax, n.intensity());
    ymin = std::min(ymin, n.gflops());
    ymax = std::max(ymax, n.gflops());
  }
  const double lx0 = std::floor(std::log10(xmin)), lx1 = std::ceil(std::log10(xmax) + 0.01);
  const double ly0 = std::floor(std::log10(ymin)), ly1 = std::ceil(std::log10(ymax) + 0.01);
  auto px = [&](double x) { return left + (std::log10(x) - lx0) / (lx1 - lx0) * (w - left - right); };
  auto py = [&](double y) { return h - bottom - (std::log10(y) - ly0) / (ly1 - ly0) * (h - top - bottom); };
  std::string s = fmt::format(
      "<svg class=\"chart\" data-chart=\"roofline\" xmlns=\"http://www.w3.org/2000/svg\" "
      "width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" role=\"img\">\n"
      "<title>Roofline: {2}</title>\n"
      "<rect x=\"{3}\" y=\"{4}\" width=\"{5}\" height=\"{6}\" fill=\"none\" stroke=\"#888\"/>\n",
      w, h, html_escape(label), left, top, w - left - right, h - top - bottom);
  for (double e = lx0; e <= lx1; ++e)
    s += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" class=\"grid\"/>"
                     "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\" class=\"tick\">{4:g}</text>\n",
                     px(std::pow(10, e)), top, h - bottom, h - bottom + 16, std::pow(10, e));
  for (double e = ly0; e <= ly1; ++e)
    s += fmt::format("<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" class=\"grid\"/>"
                     "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\" class=\"tick\">{5:g}</text>\n",
                     left, w - right, py(std::pow(10, e)), left - 6, py(std::pow(10, e)) + 4,
                     std::pow(10, e));
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"axis\">arithmetic intensity (FLOP/byte)</text>\n",
                   (left + w - right) / 2, h - 12);
  s += fmt::format("<text transform=\"translate(16 {}) rotate(-90)\" text-anchor=\"middle\" class=\"axis\">GFLOP/s</text>\n",
                   (top + h - bottom) / 2);
  // The roof, sampled at the axis ends and the ridge point.
  const double x0 = std::pow(10, lx0), x1 = std::pow(10, lx1), ridge = p.roof.ridge_intensity();
  auto roof = [&](double x) { return std::min(p.roof.peak_gflops, p.roof.bandwidth_gbs * x); };
  std::string pts;
  for (double x : {x0, std::clamp(ridge, x0, x1), x1})
    pts += fmt::format("{:.1f},{:.1f} ", px(x), py(std::max(roof(x), std::pow(10, ly0))));
  s += fmt::format("<polyline class=\"roof\" points=\"{}\" fill=\"none\" stroke=\"#000\" stroke-width=\"2\">"
                   "<title>roof: {:.0f} GFLOP/s peak, {:.1f} GB/s triad</title></polyline>\n",
                   pts, p.roof.peak_gflops, p.roof.bandwidth_gbs);
  for (const auto& n : p.nodes) {
    if (n.flops <= 0 || n.bytes <= 0 || n.seconds <= 0) continue;
    s += fmt::format(
        "<circle class=\"pt\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\" fill-opacity=\"0.75\">"
        "<title>{} ({}): {:.1f} GFLOP/s, {:.2f} FLOP/B, {:.0f}% of roofline</title></circle>\n",
        px(n.intensity()), py(n.gflops()), category_color(n.category), html_escape(n.name),
        to_string(n.kind), n.gflops(), n.intensity(), 100 * n.efficiency());
  }
  return s + "</svg>\n";
}

std::string category_table_html(const Profile& p) {
  std::string s = "<table><tr><th>category</th><th>ms</th><th>% of step</th><th>GFLOP</th>"
                  "<th>MB</th><th>GFLOP/s</th></tr>\n";
  for (const auto& r : p.categories) {
    if (r.seconds == 0 && r.nodes == 0) continue;
    s += fmt::format("<tr><td>{}</td><td>{:.2f}</td><td>{:.1f}</td><td>{:.2f}</td><td>{:.1f}</td><td>{:.1f}</td></tr>\n",
                     html_escape(r.label), r.seconds * 1e3, 100 * r.seconds / p.step_seconds,
                     r.flops / 1e9, r.bytes / 1e6, r.seconds > 0 ? r.flops / r.seconds / 1e9 : 0.0);
  }
  return s + fmt::format("<tr><th>step</th><th>{:.2f}</th><th>100.0</th><th>{:.2f}</th><th></th><th>{:.1f}</th></tr></table>\n",
                         p.step_seconds * 1e3, p.total_flops() / 1e9,
                         p.total_flops() / p.step_seconds / 1e9);
}

// Memory-bound categories by time, largest first (excludes GEMMs and unattributed).
std::vector<const BreakdownRow*> memory_bound_rows(const Profile& p) {
  std::vector<const BreakdownRow*> rows;
  for (size_t c = 0; c < p.categories.size(); ++c) {
    auto cat = static_cast<ProfileCategory>(c);
    if (!is_gemm(cat) && cat != ProfileCategory::unattributed && p.categories[c].nodes > 0)
      rows.push_back(&p.categories[c]);
  }
  std::sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return a->seconds > b->seconds; });
  return rows;
}

// For each pair of profiled points that differ in one sweep key only, the shares that key moves:
// GEMMs, the optimizer update, and the largest memory-bound category.
std::string comparisons(const std::vector<const SweepEntry*>& done) {
  std::string s;
  auto share = [](const Profile& p, ProfileCategory c) {
    return 100 * p.categories[static_cast<size_t>(c)].seconds / p.step_seconds;
  };
  for (size_t i = 0; i < done.size(); ++i)
    for (size_t j = i + 1; j < done.size(); ++j) {
      SweepKey differing{};
      int n = 0;
      for (const SweepKey k : kSweepKeys)
        if (done[i]->point.count(k) && done[i]->point.at(k) != done[j]->point.at(k)) differing = k, ++n;
      if (n != 1) continue;
      const auto &a = *done[i]->profile, &b = *done[j]->profile;
      SweepPoint common = done[i]->point;
      common.erase(differing);
      s += fmt::format("- {} {} -> {} ({}): step {:.1f} -> {:.1f} ms; GEMMs {:.1f}% -> {:.1f}%",
                       to_string(differing), done[i]->point.at(differing), done[j]->point.at(differing),
                       point_label(common), a.step_seconds * 1e3, b.step_seconds * 1e3,
                       100 * a.gemm_seconds() / a.step_seconds, 100 * b.gemm_seconds() / b.step_seconds);
      if (a.categories[static_cast<size_t>(ProfileCategory::optimizer)].nodes > 0)
        s += fmt::format("; optimizer update {:.1f}% -> {:.1f}%", share(a, ProfileCategory::optimizer),
                         share(b, ProfileCategory::optimizer));
      for (const auto* r : memory_bound_rows(b)) {
        auto cat = static_cast<ProfileCategory>(r - b.categories.data());
        if (cat == ProfileCategory::optimizer) continue;  // already listed
        s += fmt::format("; {} {:.1f}% -> {:.1f}%", r->label, share(a, cat), share(b, cat));
        break;
      }
      s += "\n";
    }
  return s.empty() ? s : "\nWhat each swept key changes (pairs differing in that key only):\n\n" + s;
}

}  // namespace

std::string html_report(const std::vector<SweepEntry>& entries, const MachineInfo& m,
                        const std::string& title) {
  size_t charts = 0;
  bool any = false;
  for (const auto& e : entries) any = any || e.profile.has_value();
  std::string body;
  body += fmt::format("<h1>{}</h1>\n<p class=\"machine\">Machine: {} ({}), {} threads; GEMM peak f32 {:.1f} GFLOP/s{}; "
                      "bandwidth read {:.1f}, write {:.1f}, triad {:.1f} GB/s (calibrated {}).</p>\n",
                      html_escape(title), html_escape(m.cpu_model), html_escape(m.isa), m.threads, m.gemm_peak_f32,
                      m.gemm_peak_bf16 ? fmt::format(", bf16 {:.1f} GFLOP/s", *m.gemm_peak_bf16) : "",
                      m.bandwidth_read, m.bandwidth_write, m.bandwidth_triad, html_escape(m.date));
  if (any) {
    body += "<h2>Share of the measured step by category</h2>\n" + category_bars_svg(entries);
    ++charts;
  }
  for (const auto& e : entries) {
    const std::string label = point_label(e.point);
    body += fmt::format("<h2>{}</h2>\n", html_escape(label));
    if (!e.profile) {
      body += fmt::format("<p class=\"skipped\">Skipped: {}</p>\n", html_escape(e.skipped));
      continue;
    }
    const auto& p = *e.profile;
    body += fmt::format("<p>Step {:.2f} ms (mean of the {} of {} timed runs not slower than the median; "
                        "median {:.2f}, min {:.2f}, max {:.2f} ms){}. GEMMs {:.1f}% of the step.</p>\n",
                        p.step_seconds * 1e3, p.kept_runs, p.runs, p.step_median_seconds * 1e3,
                        p.step_min_seconds * 1e3, p.step_max_seconds * 1e3,
                        p.accum > 1 ? fmt::format("; {} micro-batches per step", p.accum) : "",
                        100 * p.gemm_seconds() / p.step_seconds);
    body += "<div class=\"row\">" + category_table_html(p) + roofline_svg(p, label) + "</div>\n";
    ++charts;
  }
  return html_page(title, body, charts);
}

std::string markdown_report(const std::vector<SweepEntry>& entries, const MachineInfo& m) {
  std::string s = fmt::format(
      "Machine: {} ({}), {} threads; GEMM peak f32 {:.1f} GFLOP/s{}; bandwidth read {:.1f}, "
      "write {:.1f}, triad {:.1f} GB/s; calibrated {}.\n\n",
      m.cpu_model, m.isa, m.threads, m.gemm_peak_f32,
      m.gemm_peak_bf16 ? fmt::format(", bf16 {:.1f} GFLOP/s", *m.gemm_peak_bf16) : "",
      m.bandwidth_read, m.bandwidth_write, m.bandwidth_triad, m.date);
  s += "| configuration | step ms | GFLOP/s | GEMM % | non-GEMM % | unattributed % | largest memory-bound categories |\n";
  s += "|---|---:|---:|---:|---:|---:|---|\n";
  for (const auto& e : entries) {
    if (!e.profile) {
      s += fmt::format("| {} | skipped: {} | | | | | |\n", point_label(e.point), e.skipped);
      continue;
    }
    const auto& p = *e.profile;
    const double step = p.step_seconds;
    const double unattr = p.categories[static_cast<size_t>(ProfileCategory::unattributed)].seconds;
    std::string top;
    auto rows = memory_bound_rows(p);
    for (size_t i = 0; i < std::min<size_t>(3, rows.size()); ++i)
      top += fmt::format("{}{} {:.1f}%", i ? ", " : "", rows[i]->label, 100 * rows[i]->seconds / step);
    s += fmt::format("| {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {} |\n", point_label(e.point),
                     step * 1e3, p.total_flops() / step / 1e9, 100 * p.gemm_seconds() / step,
                     100 * (step - p.gemm_seconds() - unattr) / step, 100 * unattr / step, top);
  }
  // Full category table: one column per profiled configuration.
  std::vector<const SweepEntry*> done;
  for (const auto& e : entries)
    if (e.profile) done.push_back(&e);
  if (done.empty()) return s;
  s += comparisons(done);
  s += "\n| category (% of step) |";
  std::string rule = "|---|";
  for (auto* e : done) {
    s += fmt::format(" {} |", point_label(e->point));
    rule += "---:|";
  }
  s += "\n" + rule + "\n";
  for (size_t c = 0; c < kProfileCategoryCount; ++c) {
    bool used = false;
    for (auto* e : done) used = used || e->profile->categories[c].nodes > 0 || e->profile->categories[c].seconds != 0;
    if (!used) continue;
    s += fmt::format("| {} |", category_label(static_cast<ProfileCategory>(c)));
    for (auto* e : done)
      s += fmt::format(" {:.1f} |", 100 * e->profile->categories[c].seconds / e->profile->step_seconds);
    s += "\n";
  }
  return s;
}

}  // namespace bertlab
