#include "report/metrics_page.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "report/chart.h"

namespace bertlab {

namespace {

// Field `key` of an eval line: a number, or absent (nullopt); anything else is an error.
std::optional<double> number(const nlohmann::json& line, const char* key, const std::string& where) {
  const auto it = line.find(key);
  if (it == line.end()) return std::nullopt;
  check(it->is_number(), "{}: field '{}' is {}, expected a number", where, key, it->dump().substr(0, 100));
  return it->get<double>();
}

EvalPoint eval_point(const nlohmann::json& line, const std::string& where) {
  EvalPoint p;
  check(line["step"].is_number_integer(), "{}: field 'step' is {}, expected an integer", where,
        line["step"].dump().substr(0, 100));
  p.step = line["step"].get<int64_t>();
  if (const auto it = line.find("sequences"); it != line.end()) {
    check(it->is_number_integer(), "{}: field 'sequences' is {}, expected an integer", where, it->dump().substr(0, 100));
    p.sequences = it->get<int64_t>();
  }
  p.mlm_accuracy = *number(line, "eval_mlm_accuracy", where);
  p.mlm_loss = number(line, "eval_mlm_loss", where).value_or(0);
  p.most_frequent = number(line, "eval_most_frequent_accuracy", where).value_or(0);
  p.left = number(line, "eval_left_neighbour_accuracy", where);
  p.right = number(line, "eval_right_neighbour_accuracy", where);
  p.both = number(line, "eval_both_neighbours_accuracy", where);
  p.hidden_cosine = number(line, "eval_hidden_cosine", where);
  p.attention_entropy = number(line, "eval_attention_entropy", where);
  if (const auto it = line.find("eval_attention_entropy_per_layer"); it != line.end()) {
    check(it->is_array(), "{}: field 'eval_attention_entropy_per_layer' is {}, expected a list of numbers", where,
          it->dump().substr(0, 100));
    for (const auto& v : *it) {
      check(v.is_number(), "{}: field 'eval_attention_entropy_per_layer' holds {}, expected numbers", where,
            v.dump().substr(0, 100));
      p.attention_entropy_per_layer.push_back(v.get<double>());
    }
  }
  return p;
}

// A series over the points that have `field`.
ChartSeries series(const std::string& label, const std::vector<EvalPoint>& points,
                   std::optional<double> EvalPoint::*field) {
  ChartSeries s{label, {}, {}};
  for (const auto& p : points)
    if (p.*field) s.x.push_back(double(p.step)), s.y.push_back(*(p.*field));
  return s;
}

ChartSeries series(const std::string& label, const std::vector<EvalPoint>& points, double EvalPoint::*field) {
  ChartSeries s{label, {}, {}};
  for (const auto& p : points) s.x.push_back(double(p.step)), s.y.push_back(p.*field);
  return s;
}

}  // namespace

std::vector<EvalPoint> read_eval_points(const std::filesystem::path& metrics) {
  std::ifstream in(metrics, std::ios::binary);
  check(in.good(), "cannot read {}", metrics.string());
  std::map<int64_t, EvalPoint> by_step;
  int64_t line_no = 0;
  for (std::string text; std::getline(in, text);) {
    ++line_no;
    if (text.empty()) continue;
    const std::string where = fmt::format("{}:{}", metrics.string(), line_no);
    const auto line = nlohmann::json::parse(text, nullptr, false);
    check(line.is_object(), "{}: not a JSON object (a metrics.jsonl of bertlab train has one per line)", where);
    if (!line.contains("eval_mlm_accuracy")) continue;  // a step, skip or rollback line
    check(line.contains("step"), "{}: an eval line without field 'step'", where);
    EvalPoint p = eval_point(line, where);
    by_step[p.step] = std::move(p);
  }
  check(!by_step.empty(), "{}: no evaluation lines (field 'eval_mlm_accuracy'): evaluate with train --eval-steps N",
        metrics.string());
  std::vector<EvalPoint> points;
  for (auto& [step, p] : by_step) points.push_back(std::move(p));
  return points;
}

std::string metrics_page_html(const std::vector<EvalPoint>& points, const std::string& title) {
  auto has = [&](std::optional<double> EvalPoint::*field) {
    return std::any_of(points.begin(), points.end(), [&](const EvalPoint& p) { return (p.*field).has_value(); });
  };
  std::string body = fmt::format("<h1>{}</h1>\n", html_escape(title));
  body +=
      "<p>Held-out masked-LM accuracy at each evaluation, beside what a lookup of the masked token's neighbours "
      "in counts over the training text gets on the same held-out batches. A model on the plateau predicts about "
      "as well as the left neighbour alone; past the drop it beats both neighbours. The mean cosine of a "
      "sequence's final hidden states (near 1: every position gets nearly the same vector) and the attention "
      "entropy (log n for uniform attention over n tokens) show whether positions and heads have become specific "
      "(docs/training.md, \"Plateau diagnostics\").</p>\n";
  LineChart accuracy{"Held-out MLM accuracy and the neighbour yardsticks", "step", "accuracy", {}};
  accuracy.series.push_back(series("held-out MLM accuracy", points, &EvalPoint::mlm_accuracy));
  accuracy.series.push_back(series("most frequent token", points, &EvalPoint::most_frequent));
  for (auto [label, field] : {std::pair{"left neighbour", &EvalPoint::left}, std::pair{"right neighbour", &EvalPoint::right},
                              std::pair{"both neighbours", &EvalPoint::both}})
    if (has(field)) accuracy.series.push_back(series(label, points, field));
  body += "<h2>Accuracy</h2>\n" + line_chart_html(accuracy);
  size_t charts = 1;
  if (has(&EvalPoint::hidden_cosine) || has(&EvalPoint::attention_entropy))
    body += "<h2>Representation and attention</h2>\n";
  // Cosine (at most 1) and entropy (up to log S nats) apart: on one axis the cosine's changes
  // would be flattened.
  if (has(&EvalPoint::hidden_cosine)) {
    LineChart cosine{"Mean cosine of a sequence's final hidden states", "step", "cosine", {}};
    cosine.series.push_back(series("hidden cosine", points, &EvalPoint::hidden_cosine));
    body += line_chart_html(cosine);
    ++charts;
  }
  size_t layers = 0;
  for (const auto& p : points) layers = std::max(layers, p.attention_entropy_per_layer.size());
  if (has(&EvalPoint::attention_entropy)) {
    LineChart entropy{"Attention entropy: mean and per layer", "step", "entropy (nats)", {}};
    entropy.series.push_back(series("mean", points, &EvalPoint::attention_entropy));
    for (size_t l = 0; l < layers; ++l) {
      ChartSeries s{fmt::format("layer {}", l), {}, {}};
      for (const auto& p : points)
        if (l < p.attention_entropy_per_layer.size())
          s.x.push_back(double(p.step)), s.y.push_back(p.attention_entropy_per_layer[l]);
      entropy.series.push_back(std::move(s));
    }
    body += line_chart_html(entropy);
    ++charts;
  }
  return html_page(title, body, charts);
}

namespace {

bool all_have_sequences(const std::vector<RunCurve>& runs) {
  for (const auto& r : runs)
    for (const auto& p : r.points)
      if (!p.sequences) return false;
  return true;
}

// One series per run of a field over the steps or the sequences.
template <typename Value>
std::vector<ChartSeries> per_run(const std::vector<RunCurve>& runs, bool by_sequences, Value&& value) {
  std::vector<ChartSeries> out;
  for (const auto& r : runs) {
    ChartSeries s{r.label, {}, {}};
    for (const auto& p : r.points)
      if (const std::optional<double> v = value(p))
        s.x.push_back(by_sequences ? double(*p.sequences) : double(p.step)), s.y.push_back(*v);
    if (!s.x.empty()) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

LineChart comparison_accuracy_chart(const std::vector<RunCurve>& runs) {
  check(!runs.empty(), "no runs to compare");
  const bool by_sequences = all_have_sequences(runs);
  LineChart chart{"Held-out MLM accuracy", by_sequences ? "training sequences" : "step", "accuracy", {}};
  chart.series = per_run(runs, by_sequences, [](const EvalPoint& p) { return std::optional<double>(p.mlm_accuracy); });
  // The yardsticks do not change during a run: the first run's last evaluation. The right
  // neighbour's is left out: it sits beside the left one's (0.128 and 0.134 on the main job's
  // split), and their labels would overlap.
  const EvalPoint& y = runs.front().points.back();
  for (auto [label, value] : {std::pair{"both neighbours", y.both}, std::pair{"left neighbour", y.left}})
    if (value) chart.refs.push_back({*value, label});
  chart.refs.push_back({y.most_frequent, "most frequent token"});
  return chart;
}

std::string comparison_page_html(const std::vector<RunCurve>& runs, const std::string& title) {
  std::string body = fmt::format("<h1>{}</h1>\n", html_escape(title));
  const bool by_sequences = all_have_sequences(runs);
  body += fmt::format(
      "<p>{} runs, each evaluated on its own held-out batches (compare runs evaluated on the same data). The dashed "
      "lines are the first run's yardsticks: a lookup of the masked token's neighbours in counts over the training "
      "text, and always predicting the most frequent token (docs/training.md, \"Plateau diagnostics\"). The x axis "
      "is {}.</p>\n",
      runs.size(), by_sequences ? "the training sequences seen (equal data for runs of any batch size)"
                                : "the optimizer step (a run logged before the sequences were recorded)");
  body += "<h2>Accuracy</h2>\n" + line_chart_html(comparison_accuracy_chart(runs));
  size_t charts = 1;
  const std::string x_label = by_sequences ? "training sequences" : "step";
  LineChart cosine{"Mean cosine of a sequence's final hidden states", x_label, "cosine", {}};
  cosine.series = per_run(runs, by_sequences, [](const EvalPoint& p) { return p.hidden_cosine; });
  LineChart entropy{"Mean attention entropy", x_label, "entropy (nats)", {}};
  entropy.series = per_run(runs, by_sequences, [](const EvalPoint& p) { return p.attention_entropy; });
  for (const LineChart* c : {&cosine, &entropy})
    if (!c->series.empty()) {
      body += "<h2>" + html_escape(c->title) + "</h2>\n" + line_chart_html(*c);
      ++charts;
    }
  return html_page(title, body, charts);
}

}  // namespace bertlab
