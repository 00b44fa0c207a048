// bertlab report: the page of a pretraining run's metrics.jsonl, its held-out curve with the
// plateau diagnostics (report/metrics_page.h).
#include <fmt/core.h>

#include "apps/commands.h"
#include "apps/common.h"
#include "base/error.h"
#include "report/metrics_page.h"

namespace bertlab::app {

namespace {
struct ReportCli {
  std::vector<std::string> metrics, labels;
  std::string out, title, svg;
};
}  // namespace

void add_report_command(CLI::App& root) {
  auto* cmd = root.add_subcommand(
      "report", "Draw a training run's held-out accuracy, neighbour yardsticks, hidden-state cosine and attention "
                "entropy over the steps (a self-contained HTML page)");
  auto c = std::make_shared<ReportCli>();
  cmd->add_option("--metrics", c->metrics,
                  "metrics.jsonl of `bertlab train` (OUT/metrics.jsonl); several: one page comparing the runs")
      ->required();
  cmd->add_option("--label", c->labels, "With several --metrics: the name of each run, in order (default: its directory)");
  cmd->add_option("-o,--out", c->out, "HTML page to write")->required();
  cmd->add_option("--svg", c->svg, "Also write the accuracy chart alone as an SVG file (for a document)");
  cmd->add_option("--title", c->title, "Page title (default: the metrics file's directory)");
  cmd->callback([c] {
    auto dir_of = [](const std::string& file) { return std::filesystem::path(file).parent_path().string(); };
    check(c->labels.empty() || c->labels.size() == c->metrics.size(),
          "--label: {} given for {} --metrics files; give one per file, in order, or none", c->labels.size(),
          c->metrics.size());
    std::vector<RunCurve> runs;
    for (size_t i = 0; i < c->metrics.size(); ++i)
      runs.push_back({c->labels.empty() ? dir_of(c->metrics[i]) : c->labels[i], read_eval_points(c->metrics[i])});
    if (runs.size() == 1) {
      const auto& points = runs[0].points;
      const std::string title = c->title.empty() ? fmt::format("Pretraining run {}", dir_of(c->metrics[0])) : c->title;
      write_text_atomically(c->out, metrics_page_html(points, title));
      fmt::print(stderr, "wrote {}: {} evaluations, steps {} to {}\n", c->out, points.size(), points.front().step,
                 points.back().step);
    } else {
      const std::string title = c->title.empty() ? fmt::format("{} pretraining runs", runs.size()) : c->title;
      write_text_atomically(c->out, comparison_page_html(runs, title));
      fmt::print(stderr, "wrote {}: {} runs compared\n", c->out, runs.size());
    }
    if (!c->svg.empty()) {
      LineChart chart = comparison_accuracy_chart(runs);
      if (!c->title.empty()) chart.title = c->title;
      write_text_atomically(c->svg, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + line_chart_svg(chart));
      fmt::print(stderr, "wrote {}\n", c->svg);
    }
  });
}

}  // namespace bertlab::app
