// bertlab report: the page of a pretraining run's metrics.jsonl, its held-out curve with the
// plateau diagnostics (report/metrics_page.h).
#include <fmt/core.h>

#include "apps/commands.h"
#include "apps/common.h"
#include "report/metrics_page.h"

namespace bertlab::app {

namespace {
struct ReportCli {
  std::string metrics, out, title;
};
}  // namespace

void add_report_command(CLI::App& root) {
  auto* cmd = root.add_subcommand(
      "report", "Draw a training run's held-out accuracy, neighbour yardsticks, hidden-state cosine and attention "
                "entropy over the steps (a self-contained HTML page)");
  auto c = std::make_shared<ReportCli>();
  cmd->add_option("--metrics", c->metrics, "metrics.jsonl of `bertlab train` (OUT/metrics.jsonl)")->required();
  cmd->add_option("-o,--out", c->out, "HTML page to write")->required();
  cmd->add_option("--title", c->title, "Page title (default: the metrics file's directory)");
  cmd->callback([c] {
    const auto points = read_eval_points(c->metrics);
    const std::string title =
        c->title.empty() ? fmt::format("Pretraining run {}", std::filesystem::path(c->metrics).parent_path().string())
                         : c->title;
    write_text_atomically(c->out, metrics_page_html(points, title));
    fmt::print(stderr, "wrote {}: {} evaluations, steps {} to {}\n", c->out, points.size(), points.front().step, points.back().step);
  });
}

}  // namespace bertlab::app
