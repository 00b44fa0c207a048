#pragma once
// The page of one pretraining run (bertlab report --metrics OUT/metrics.jsonl): the held-out
// masked-LM accuracy beside the neighbour yardsticks, and the hidden-state cosine and attention
// entropy, over the steps, drawn with report/chart.h (docs/training.md, "Plateau diagnostics").
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "report/chart.h"

namespace bertlab {

// One evaluation of metrics.jsonl. The diagnostics are absent in runs without them (logs from
// before them, or train --no-eval-diagnostics).
struct EvalPoint {
  int64_t step = 0;
  std::optional<int64_t> sequences;  // training sequences seen by then (logs from before it: absent)
  double mlm_accuracy = 0, mlm_loss = 0, most_frequent = 0;
  std::optional<double> left, right, both, hidden_cosine, attention_entropy;
  std::vector<double> attention_entropy_per_layer;
};

// The eval lines of a metrics.jsonl, by step; where a step was evaluated more than once (a
// rollback redoes steps) the last line of it counts. Throws Error naming the file and line for a
// line that is not a JSON object or an eval line with a field of the wrong type, and naming the
// file when it cannot be read or has no eval line.
std::vector<EvalPoint> read_eval_points(const std::filesystem::path& metrics);

// A self-contained page (report/chart.h html_page): the accuracy and yardsticks chart, the
// hidden-state cosine chart and the attention entropy chart (the mean, and each layer's when
// logged), each beside its numbers; the last two when the run logged them.
std::string metrics_page_html(const std::vector<EvalPoint>& points, const std::string& title);

// Several runs on one page (bertlab report --metrics A --metrics B ...), to compare recipes.
struct RunCurve {
  std::string label;
  std::vector<EvalPoint> points;
};
// The held-out accuracy of every run in one chart, over the training sequences when every run
// logged them (runs of different batch sizes compare at equal data) and over the steps
// otherwise, with the first run's left- and both-neighbour yardsticks and most-frequent-token
// accuracy as dashed lines; then the hidden cosine and the mean attention entropy of every run that logged them.
LineChart comparison_accuracy_chart(const std::vector<RunCurve>& runs);
std::string comparison_page_html(const std::vector<RunCurve>& runs, const std::string& title);

}  // namespace bertlab
