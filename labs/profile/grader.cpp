// Lab 1's grader: the student's FLOPs and bytes of linear, attention-score, layernorm and softmax
// nodes against the graph's own rules (runtime/graph.h node_flops, node_min_bytes) on every such
// node of real BERT training graphs; the student's predictions of how the shares of a BERT-mini
// step's FLOPs and bytes move, against the same graphs summed by category; and, for the handout,
// the category shares as bars. Timing is left to `bertlab profile` (the handout's steps): a
// measured breakdown on a shared laptop is too noisy to grade.
#include <CLI/CLI.hpp>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "labs/common/grader.h"
#include "labs/profile/lab.h"
#include "ops/activation.h"
#include "report/chart.h"
#include "runtime/bert_builder.h"
#include "runtime/fusion.h"
#include "runtime/op_rules.h"
#include "runtime/profiler.h"

using namespace bertlab;
using namespace bertlab::lab;

namespace {

struct Run {
  std::string config;  // configs/NAME.json
  int64_t batch, seq;
  Precision precision;
  std::string label() const {
    return fmt::format("{} b{} s{}{}", config, batch, seq, precision == Precision::bf16 ? " bf16" : "");
  }
};

// The training graph `bertlab profile --mode train` runs: built, then fused.
Graph training_graph(const Run& r) {
  RunSpec spec;
  spec.batch = r.batch;
  spec.seq = r.seq;
  spec.mode = RunMode::train;
  spec.precision = r.precision;
  Graph g = build_bert(load_config(source_dir() + "/configs/" + r.config + ".json"), spec);
  apply_fusions(g);
  return g;
}

const Shape& in_shape(const Graph& g, const Node& n, size_t i) { return g.tensor(n.inputs.at(i)).shape; }

// The student's cost of node n, or nullopt for kinds this lab does not cover.
std::optional<profile::Cost> student_cost(const Graph& g, const Node& n) {
  if (n.kind == OpKind::linear) {
    const Shape& x = in_shape(g, n, 0);
    const Shape& w = in_shape(g, n, 1);
    return profile::linear(numel(x) / x.back(), w[1], w[0], n.inputs.size() > 3,
                           ops::activation_info(activation_of(n)).forward_flops);
  }
  if (n.kind == OpKind::attn_scores) {
    const Shape& qkv = in_shape(g, n, 0);
    return profile::attention_scores(qkv[0], qkv[1], qkv[2] / 3, n.attrs.at("heads").get<int64_t>());
  }
  if (n.kind == OpKind::layernorm) {
    const Shape& x = in_shape(g, n, 0);
    return profile::layernorm(numel(x) / x.back(), x.back());
  }
  if (n.kind == OpKind::softmax) {
    const Shape& s = in_shape(g, n, 0);
    if (s.size() == 4 && s[2] == s[3]) return profile::softmax(s[0], s[1], s[2]);
  }
  return std::nullopt;  // a kind (or shape) this lab does not cover
}

std::string describe(const Graph& g, const Node& n) {
  std::string s = fmt::format("node '{}' ({}; inputs", n.name, to_string(n.kind));
  for (int t : n.inputs) s += " " + shape_str(g.tensor(t).shape);
  return s + ")";
}

// Every node of `kind` in each run's graph: the student's FLOPs and bytes must equal the graph's.
Outcome node_costs(OpKind kind, const std::vector<Run>& runs) {
  size_t nodes = 0;
  for (const Run& r : runs) {
    const Graph g = training_graph(r);
    for (const Node& n : g.nodes()) {
      if (n.kind != kind) continue;
      working_on(fmt::format("node '{}' of {}", n.name, r.label()));  // named if the student's code crashes
      const auto got = student_cost(g, n);
      if (!got) continue;
      const double want_f = node_flops(g, n), want_b = double(node_min_bytes(g, n));
      auto off = [](double a, double b) { return !std::isfinite(a) || std::abs(a - b) > 1e-9 * std::abs(b) + 0.5; };
      // Which count is off and which way, not the graph's numbers: those are the answer.
      auto verdict = [&](double yours, double want) {
        return !off(yours, want) ? "right" : !std::isfinite(yours) ? "not a number" : yours > want ? "too many" : "too few";
      };
      if (off(got->flops, want_f) || off(got->bytes, want_b))
        return failed(fmt::format("{} of {}: your {:.0f} FLOPs are {}, your {:.0f} bytes are {}", describe(g, n),
                                  r.label(), got->flops, verdict(got->flops, want_f), got->bytes,
                                  verdict(got->bytes, want_b)));
      ++nodes;
    }
  }
  if (nodes == 0) return failed(fmt::format("no {} nodes found", to_string(kind)));
  std::string names;
  for (const Run& r : runs) names += (names.empty() ? "" : ", ") + r.label();
  return passed(fmt::format("{} {} nodes of {} match the graph's FLOPs and bytes", nodes, to_string(kind), names));
}

// FLOPs and bytes of one training step per profile category: forward and backward `accum`
// times, the optimizer once (as TrainStepper runs a step).
struct Shares {
  std::array<double, kProfileCategoryCount> flops{}, bytes{};
  double total_flops = 0, total_bytes = 0;
  double flop_share(std::initializer_list<ProfileCategory> cs) const {
    double s = 0;
    for (auto c : cs) s += flops[size_t(c)];
    return s / total_flops;
  }
  double byte_share(std::initializer_list<ProfileCategory> cs) const {
    double s = 0;
    for (auto c : cs) s += bytes[size_t(c)];
    return s / total_bytes;
  }
};

Shares step_shares(const Run& r, int accum) {
  const Graph g = training_graph(r);
  Shares s;
  for (const Node& n : g.nodes()) {
    const double times = n.phase == Phase::optimizer ? 1 : accum;
    const size_t c = size_t(profile_category_of(n.kind));
    s.flops[c] += times * node_flops(g, n);
    s.bytes[c] += times * double(node_min_bytes(g, n));
  }
  for (size_t c = 0; c < kProfileCategoryCount; ++c) s.total_flops += s.flops[c], s.total_bytes += s.bytes[c];
  return s;
}

// A share that changes by less than 0.01 percentage points counts as the same.
profile::Move move_of(double before, double after) {
  if (std::abs(after - before) < 1e-4) return profile::Move::same;
  return after > before ? profile::Move::up : profile::Move::down;
}

// The profile categories drawn as ten bars (the chart's ten colours): the small ones merged.
constexpr size_t kBars = 10;
size_t bar_of(ProfileCategory c) {
  switch (c) {
    case ProfileCategory::gemm_linear: return 0;
    case ProfileCategory::gemm_attention: return 1;
    case ProfileCategory::gemm_dx: return 2;
    case ProfileCategory::gemm_dw: return 3;
    case ProfileCategory::softmax: return 4;
    case ProfileCategory::layernorm: return 5;
    case ProfileCategory::activation: return 6;
    case ProfileCategory::dropout:
    case ProfileCategory::add: return 7;
    case ProfileCategory::optimizer:
    case ProfileCategory::communication: return 8;
    case ProfileCategory::embedding:
    case ProfileCategory::loss:
    case ProfileCategory::other:
    case ProfileCategory::unattributed: return 9;
  }
  return 9;
}
constexpr const char* kBarNames[kBars] = {"projection/FFN GEMMs", "attention GEMMs", "backward dX GEMMs",
                                          "backward dW GEMMs",    "softmax",         "layernorm",
                                          "GELU",                 "dropout and adds", "optimizer",
                                          "embedding, loss, other"};

void plot_shares(const PlotPage& plots) {
  struct Column {
    std::string label;
    Shares s;
  };
  const Run base{"bert-mini", 8, 128, Precision::fp32};
  const std::vector<Column> cols = {
      {"mini s128", step_shares(base, 1)},
      {"mini s512", step_shares({"bert-mini", 8, 512, Precision::fp32}, 1)},
      {"mini accum 4", step_shares(base, 4)},
      {"base s128", step_shares({"bert-base", 8, 128, Precision::fp32}, 1)},
  };
  std::vector<std::string> groups;
  for (const auto& c : cols) groups.push_back(c.label);
  std::vector<ChartSeries> flops, bytes;
  for (size_t k = 0; k < kBars; ++k) {
    flops.push_back({kBarNames[k], {}, std::vector<double>(cols.size(), 0.0)});
    bytes.push_back({kBarNames[k], {}, std::vector<double>(cols.size(), 0.0)});
  }
  for (size_t j = 0; j < cols.size(); ++j)
    for (size_t c = 0; c < kProfileCategoryCount; ++c) {
      const size_t k = bar_of(ProfileCategory(c));
      flops[k].y[j] += 100 * cols[j].s.flops[c] / cols[j].s.total_flops;
      bytes[k].y[j] += 100 * cols[j].s.bytes[c] / cols[j].s.total_bytes;
    }
  // The GEMMs are ~99% of the FLOPs: a second chart leaves them out so that the small categories
  // show (same series, same colours; the GEMMs' bars are left empty).
  std::vector<ChartSeries> small = flops;
  for (size_t k = 0; k < kBars; ++k)
    if (k <= 3) std::fill(small[k].y.begin(), small[k].y.end(), std::nan(""));
  plots.add("<h2>Where the FLOPs and the bytes of a training step are</h2>\n<p>From the graph's rules "
            "(BERT-mini and BERT-base, batch 8, fp32): the categories of <code>bertlab profile</code>'s "
            "breakdown, counted, not timed. The tables give every bar's value.</p>\n" +
            bar_chart_html({"share of the step's FLOPs by category", "% of FLOPs", groups, flops}) +
            bar_chart_html({"the same without the GEMMs: the small categories' share of FLOPs", "% of FLOPs", groups,
                            small}) +
            bar_chart_html({"share of the step's minimal bytes by category", "% of bytes", groups, bytes}));
}

// The bars show how every share moves: the answers. They are drawn once the predictions are right.
Outcome check_predictions(const PlotPage& plots) {
  working_on("predictions()");  // named if the student's code crashes
  const profile::Predictions p = profile::predictions();
  working_on("");  // what follows is the grader's own work
  using PC = ProfileCategory;
  const Run base{"bert-mini", 8, 128, Precision::fp32};
  const Shares s0 = step_shares(base, 1), s512 = step_shares({"bert-mini", 8, 512, Precision::fp32}, 1),
               bf16 = step_shares({"bert-mini", 8, 128, Precision::bf16}, 1), acc4 = step_shares(base, 4);
  const std::initializer_list<PC> gemms = {PC::gemm_linear, PC::gemm_attention, PC::gemm_dx, PC::gemm_dw};
  struct Item {
    const char* what;
    profile::Move predicted;
    double before, after;
  };
  const Item items[] = {
      {"attention share of FLOPs at seq 512", p.attention_flops_share_at_seq512,
       s0.flop_share({PC::gemm_attention, PC::softmax}), s512.flop_share({PC::gemm_attention, PC::softmax})},
      {"GEMM share of FLOPs in bf16", p.gemm_flops_share_in_bf16, s0.flop_share(gemms), bf16.flop_share(gemms)},
      {"optimizer share of FLOPs at accum 4", p.optimizer_flops_share_at_accum4, s0.flop_share({PC::optimizer}),
       acc4.flop_share({PC::optimizer})},
      {"softmax share of bytes at seq 512", p.softmax_bytes_share_at_seq512, s0.byte_share({PC::softmax}),
       s512.byte_share({PC::softmax})},
  };
  std::string detail;
  size_t wrong = 0;
  for (const Item& it : items) {
    const auto truth = move_of(it.before, it.after);
    detail += fmt::format("{}{}: {:.2f}% -> {:.2f}% ({})", detail.empty() ? "" : "; ", it.what, 100 * it.before,
                          100 * it.after, to_string(truth));
    if (truth != it.predicted) ++wrong;
  }
  // The page shows the student's predictions; the shares beside them only once all are right.
  std::string table = "<h2>Your predictions</h2>\n<table>\n<tr><th>the share</th><th>you predicted</th>";
  table += wrong ? "</tr>\n" : "<th>BERT-mini s128 fp32 accum 1</th><th>after the change</th><th>it moved</th></tr>\n";
  for (const Item& it : items) {
    table += fmt::format("<tr><td>{}</td><td>{}</td>", html_escape(it.what), to_string(it.predicted));
    if (!wrong)
      table += fmt::format("<td>{:.2f}%</td><td>{:.2f}%</td><td class=\"right\">{}</td>", 100 * it.before,
                           100 * it.after, to_string(move_of(it.before, it.after)));
    table += "</tr>\n";
  }
  table += "</table>\n";
  // A failure says neither which nor how many are wrong, nor the shares: each would let a student
  // who only flips predictions find the answer (a count tells, one flip at a time, which moved).
  if (wrong > 0) {
    plots.add(table + "<h2>Where the FLOPs and the bytes of a training step are</h2>\n<p>The shares and their bars "
                      "appear here once your four predictions are right.</p>\n");
    return failed(fmt::format("your {} predictions are not all right yet; the shares are shown once all are right",
                              std::size(items)));
  }
  plots.add(table);
  plot_shares(plots);
  return passed(detail);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 1 grader: the cost of a node, and your predictions (labs/profile/student.cpp)"};
  std::string out = "out/labs";
  bool quick = false;
  app.add_option("--out", out, "Where the plots page goes");
  app.add_flag("--quick", quick, "Fewer graphs (the test suite)");
  std::string results_json;
  add_results_json_option(app, results_json);
  CLI11_PARSE(app, argc, argv);

  std::vector<Run> runs = {{"bert-mini", 8, 128, Precision::fp32}, {"bert-base", 8, 128, Precision::fp32}};
  if (!quick) {
    runs.push_back({"bert-mini", 2, 512, Precision::bf16});
    runs.push_back({"bert-tiny", 3, 77, Precision::fp32});
  }
  Grader g("profile: the cost of a node, and where a training step's work goes", results_json);
  const PlotPage plots(out, "profile");
  // This grader times nothing, but step 5's sweep profiles bf16: say now if this CPU cannot.
  if (const std::string no_bf16 = bf16_unavailable(); !no_bf16.empty()) {
    const std::string why = fmt::format(
        "no native bf16 matmul here ({}): in step 5, `bertlab profile --sweep precision=fp32,bf16` "
        "profiles fp32 only and prints \"skipped\" for the bf16 points. This grader's checks count FLOPs and "
        "bytes, which do not depend on the CPU, and all run",
        no_bf16);
    g.skipped("step 5's bf16 profiles", why);
    plots.add("<p class=\"skipped\">bf16: " + html_escape(why) + ".</p>\n");
  }
  // Hints say where to look, not what the answer is.
  const std::string cost_hint = "the detail says which count is off and which way; list the node's inputs (its "
                                "shapes are printed) and compare each with what your function counts, in lab.h's "
                                "conventions";
  g.check("linear nodes", cost_hint + "; does the failing node have a residual or an activation?",
          [&] { return node_costs(OpKind::linear, runs); });
  g.check("attention-score nodes", cost_hint + "; which parts of qkv does Q K^T use?",
          [&] { return node_costs(OpKind::attn_scores, runs); });
  g.check("layernorm nodes", cost_hint, [&] { return node_costs(OpKind::layernorm, runs); });
  g.check("softmax nodes", cost_hint, [&] { return node_costs(OpKind::softmax, runs); });
  g.check("your predictions",
          "for each prediction, ask how the named nodes' counts and everyone else's grow: with S, with S^2 (per "
          "sequence), with the number of micro-batches, or not at all",
          [&] { return check_predictions(plots); }, 300);
  fmt::print("plots: {}\n", plots.write("Lab 1: where the work of a BERT training step is").string());
  return g.finish();
}
