// Lab 3's grader: the student's RWMA and BWMA address functions against the accelerator model's
// own layout (hwmodel/layout.h make_view(...).addr) on every element of odd shapes; the
// student's hand counts of cache lines against the exact trace simulator (hwmodel/tracesim.h)
// and the analytic model that `bertlab estimate` runs for every GEMM node (hwmodel/analytic.h
// analytic_traffic, whose counts `--explain` prints); and, unscored, the sweep of S and cores
// over one BERT-base encoder layer on the paper's system under the array-only model (configs/systems/paper-ticsat-array.json),
// drawn on the plots page.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "hwmodel/analytic.h"
#include "hwmodel/estimate.h"
#include "hwmodel/layout.h"
#include "hwmodel/tracesim.h"
#include "labs/arrangement/lab.h"
#include "labs/common/grader.h"
#include "report/chart.h"
#include "runtime/bert_builder.h"
#include "runtime/fusion.h"

using namespace bertlab;
using namespace bertlab::lab;
namespace la = bertlab::lab::arrangement;

namespace {

hw::Arrangement to_hw(la::Layout l) {
  switch (l) {
    case la::Layout::rwma: return hw::Arrangement::rwma;
    case la::Layout::bwma: return hw::Arrangement::bwma;
  }
  return hw::Arrangement::rwma;
}

struct Shape2 {
  int64_t rows, cols;
};

// Which way a student's number is off, without the right one: the handout asks for these by hand.
const char* off_by(int64_t yours, int64_t want) {
  return yours == want ? "right" : yours > want ? "too large" : "too small";
}

// Part A: every element of every shape against the model's layout. A failure names the first
// wrong element and which way it is off, not the right offset (step 2 asks for one by hand).
Outcome offsets(hw::Arrangement arr, const std::vector<Shape2>& shapes, const std::vector<int64_t>& kernels) {
  size_t elements = 0;
  for (int64_t S : kernels)
    for (const Shape2& sh : shapes) {
      const hw::MatrixView v = hw::make_view(arr, 0, sh.rows, sh.cols, 1, S);
      const std::string what = arr == hw::Arrangement::bwma
                                   ? fmt::format("bwma_offset of a {} x {} matrix at S = {}", sh.rows, sh.cols, S)
                                   : fmt::format("rwma_offset of a {} x {} matrix", sh.rows, sh.cols);
      for (int64_t r = 0; r < sh.rows; ++r)
        for (int64_t c = 0; c < sh.cols; ++c) {
          working_on(fmt::format("{}, row {}, column {}", what, r, c));  // named if the student's code crashes
          const auto want = static_cast<int64_t>(v.addr(r, c));
          const int64_t got = arr == hw::Arrangement::bwma ? la::bwma_offset(r, c, sh.rows, sh.cols, S)
                                                           : la::rwma_offset(r, c, sh.rows, sh.cols);
          if (got != want)
            return failed(fmt::format("{}: first wrong element (row {}, column {}): your offset {} is {}", what, r, c,
                                      got, off_by(got, want)));
        }
      elements += size_t(sh.rows * sh.cols);
    }
  return passed(fmt::format("{} elements of {} shapes{} match hwmodel's layout", elements, shapes.size(),
                            arr == hw::Arrangement::bwma ? fmt::format(" x {} kernel sizes", kernels.size()) : ""));
}

// A one-core system with the paper's array and caches of `llc_bytes` (line `line`). Its L1 and
// LLC see every access; DRAM counts depend only on the LLC.
hw::SystemDesc lab_system(int64_t S, int64_t line, int64_t llc_bytes) {
  hw::SystemDesc s;
  s.name = "lab-arrangement";
  s.cores = 1;
  s.array.kernel = S;
  s.l1 = {2048, 2, line, 2, false};
  s.llc = {llc_bytes, 8, line, 20, false};
  s.dram.row_bytes = 1024;
  s.dram.banks = 64;
  s.dram.burst_bytes = line;
  s.dram.peak_gbps = 10;
  s.rwma_block_rows = 16;
  hw::validate(s, "the lab's system");
  return s;
}

// The three matrices of g, page-aligned one after another, in `arr`.
struct Operands {
  hw::MatrixView a, w, y;
};
Operands place(hw::Arrangement arr, const la::Gemm& g) {
  uint64_t next = uint64_t{1} << 20;
  auto take = [&](int64_t rows, int64_t cols) {
    const uint64_t base = next;
    next += uint64_t(hw::view_bytes(arr, rows, cols, 1, g.S) + 4095) / 4096 * 4096 + 4096;
    return hw::make_view(arr, base, rows, cols, 1, g.S);
  };
  Operands o;
  o.a = take(g.M, g.K);
  o.w = take(g.K, g.N);
  o.y = take(g.M, g.N);
  return o;
}

struct Counted {
  la::Lines sim, model;
};

// DRAM line reads per operand of `w`, by the exact simulator and by the analytic model.
Counted dram_reads(const hw::GemmWork& w, const hw::SystemDesc& s) {
  hw::TraceSim sim(s, 1);
  sim.run(w);
  const hw::Traffic ex = sim.finish();
  const hw::Traffic an = hw::analytic_traffic(w, s, 1);
  auto reads = [&](const hw::Traffic& t) {
    auto r = [&](const std::string& n) { return t.operands.count(n) ? t.operands.at(n).read_lines : int64_t{0}; };
    return la::Lines{r(w.a_name), r(w.b_name), r(w.y_name)};
  };
  return {reads(ex), reads(an)};
}

// The GEMM of g (the whole of it, or only its first array step: the first S x S tile of W
// against the first S columns of A and Y, as sub-views of the whole matrices).
hw::GemmWork gemm_work(hw::Arrangement arr, const la::Gemm& g, bool first_step_only) {
  const Operands o = place(arr, g);
  hw::GemmWork w;
  w.arrangement = arr;
  w.S = g.S;
  w.m = g.M;
  w.block_rows = 16;
  if (first_step_only) {
    w.k = w.n = g.S;
    w.instances.push_back({hw::sub_view(o.a, 0, g.M, 0, g.S), hw::sub_view(o.w, 0, g.S, 0, g.S),
                           hw::sub_view(o.y, 0, g.M, 0, g.S)});
  } else {
    w.k = g.K;
    w.n = g.N;
    w.instances.push_back({o.a, o.w, o.y});
  }
  return w;
}

std::string lines_str(const la::Lines& l) { return fmt::format("A {}, W {}, Y {}", l.a, l.w, l.y); }
// The student's counts and, per operand, which way each is off: not the simulator's counts,
// which are the answers the handout asks for.
std::string verdict_str(const la::Lines& got, const la::Lines& want) {
  return fmt::format("you count {}: A is {}, W is {}, Y is {}", lines_str(got), off_by(got.a, want.a),
                     off_by(got.w, want.w), off_by(got.y, want.y));
}
bool same(const la::Lines& x, const la::Lines& y) { return x.a == y.a && x.w == y.w && x.y == y.y; }
std::string gemm_str(const la::Gemm& g) {
  return fmt::format("M={} K={} N={} S={} line={}", g.M, g.K, g.N, g.S, g.line);
}
const char* layout_name(la::Layout l) { return hw::to_string(to_hw(l)); }

// Part B: the student's count against the exact simulator, every shape, both layouts, and the
// simulator against the analytic model of `bertlab estimate`.
// The LLC holds all three matrices (every line is read once at most).
Outcome hand_counts(const std::vector<la::Gemm>& gemms, bool first_step_only) {
  std::string detail, model_notes;
  for (const la::Gemm& g : gemms)
    for (la::Layout l : {la::Layout::rwma, la::Layout::bwma}) {
      const hw::SystemDesc s = lab_system(g.S, g.line, int64_t{1} << 22);
      const Counted c = dram_reads(gemm_work(to_hw(l), g, first_step_only), s);
      working_on(fmt::format("{} {}", layout_name(l), gemm_str(g)));
      const la::Lines got = first_step_only ? la::tile_lines(l, g) : la::cold_dram_reads(l, g);
      if (!same(got, c.sim))
        return failed(fmt::format("{} {}: {}", layout_name(l), gemm_str(g), verdict_str(got, c.sim)));
      // The simulator is exact. The analytic model counts each BWMA panel's lines on their own,
      // so it counts a line twice where two panels share it (M*S not a multiple of the line):
      // it must agree wherever the panels start on line boundaries.
      const bool panels_aligned = l == la::Layout::rwma || (g.M * g.S) % g.line == 0;
      if (panels_aligned && !same(c.sim, c.model))
        return failed(fmt::format("the grader's simulator and model disagree on {} {} (simulator {}, model {}): "
                                  "report this to your teacher",
                                  layout_name(l), gemm_str(g), lines_str(c.sim), lines_str(c.model)));
      if (!same(c.sim, c.model))
        model_notes += fmt::format("; {} {}: the model counts {} (each panel's lines on their own)", layout_name(l),
                                   gemm_str(g), lines_str(c.model));
      if (g.M == gemms.front().M && g.S == gemms.front().S)
        detail += fmt::format("{}{} {}: {}", detail.empty() ? "" : "; ", layout_name(l), gemm_str(g), lines_str(got));
    }
  return passed(fmt::format("{} GEMMs x 2 layouts agree with the simulator (e.g. {}){}", gemms.size(), detail,
                            model_notes));
}

// The LLC of the too-small case (lab.h bwma_small_llc_reads).
constexpr int64_t kSmallLlc = 16 * 1024;

// Part B: the student's BWMA count with an LLC too small for A, against the simulator and the
// model (every shape has M x S a multiple of the line: the two must agree).
Outcome small_llc_counts(const std::vector<la::Gemm>& gemms) {
  std::string detail;
  for (const la::Gemm& g : gemms) {
    const Counted c = dram_reads(gemm_work(hw::Arrangement::bwma, g, false), lab_system(g.S, g.line, kSmallLlc));
    working_on(fmt::format("bwma {} with a 16 KB LLC", gemm_str(g)));
    const la::Lines got = la::bwma_small_llc_reads(g);
    if (!same(got, c.sim))
      return failed(fmt::format("bwma {} with a 16 KB LLC: {}", gemm_str(g), verdict_str(got, c.sim)));
    if (!same(c.sim, c.model))
      return failed(fmt::format("the grader's simulator and model disagree on bwma {} with a 16 KB LLC (simulator "
                                "{}, model {}): report this to your teacher",
                                gemm_str(g), lines_str(c.sim), lines_str(c.model)));
    if (detail.empty()) detail = fmt::format(" (e.g. {}: {})", gemm_str(g), lines_str(got));
  }
  return passed(fmt::format("{} GEMMs agree with the simulator and the model{}", gemms.size(), detail));
}

// Unscored: the DRAM reads of a GEMM when the LLC is too small to keep A between output panels.
std::string small_llc(const la::Gemm& g, int64_t llc_bytes) {
  std::string s = fmt::format("{} with a {} KB LLC, DRAM line reads (simulator):", gemm_str(g), llc_bytes / 1024);
  for (la::Layout l : {la::Layout::rwma, la::Layout::bwma}) {
    const Counted c = dram_reads(gemm_work(to_hw(l), g, false), lab_system(g.S, g.line, llc_bytes));
    s += fmt::format(" {} {} (model {});", layout_name(l), lines_str(c.sim), lines_str(c.model));
  }
  return s;
}

// Part C (unscored): one BERT-base encoder layer (inference, batch 1, seq 512 (the paper's workload), as `bertlab
// estimate --config configs/bert-base.json --nodes encoder.0.`) on the paper's system, every S
// and core count, both arrangements.
Graph encoder_layer() {
  RunSpec run;
  run.batch = 1;
  run.seq = 512;
  run.mode = RunMode::infer;
  Graph g = build_bert(load_config(source_dir() + "/configs/bert-base.json"), run);
  apply_fusions(g);
  std::vector<bool> dead(g.nodes().size());
  for (const auto& n : g.nodes()) dead[n.id] = n.name.rfind("encoder.0.", 0) != 0;
  g.compact(dead);
  return g;
}

// The op of a node: its name in the layer, a conversion counted with the op that needs it.
std::string op_of(const std::string& node) {
  std::string s = node.substr(std::string("encoder.0.").size());
  if (s.size() > 8 && s.substr(s.size() - 8) == ".convert") s.resize(s.size() - 8);
  return s;
}

// One row of the table `bertlab estimate --paper-table` wrote for the paper's system and setup
// (docs/hwmodel-paper-table-estimate.md: the full core model, the whole BERT-base graph at seq
// 512) at S and `cores`: each column's header and its number ("2.71x", "+0.187" and "-663.2%" read
// without the unit). Throws naming the file and what is missing.
std::map<std::string, double> paper_table_row(const std::string& path, int64_t S, int64_t cores) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  auto cells = [](const std::string& line) {
    std::vector<std::string> out;
    for (size_t p = 1, q; (q = line.find('|', p)) != std::string::npos; p = q + 1) {
      std::string c = line.substr(p, q - p);
      const size_t a = c.find_first_not_of(' '), b = c.find_last_not_of(' ');
      out.push_back(a == std::string::npos ? "" : c.substr(a, b - a + 1));
    }
    return out;
  };
  std::vector<std::string> header;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| S | cores |", 0) == 0) header = cells(line);
    if (header.empty() || line.rfind(fmt::format("| {} | {} |", S, cores), 0) != 0) continue;
    const std::vector<std::string> row = cells(line);
    std::map<std::string, double> out;
    for (size_t i = 0; i < row.size() && i < header.size(); ++i) {
      try {
        out[header[i]] = std::stod(row[i]);  // stod stops at the unit
      } catch (const std::exception&) {
        throw std::runtime_error(fmt::format("{}: S = {}, {} core(s): column '{}' is '{}', not a number", path, S,
                                             cores, header[i], row[i]));
      }
    }
    return out;
  }
  throw std::runtime_error(fmt::format("{} has no row for S = {}, {} core(s) under a '| S | cores |' header", path, S,
                                       cores));
}

// A column of that row, or an error naming it.
double paper_column(const std::map<std::string, double>& row, const std::string& column, const std::string& path) {
  const auto it = row.find(column);
  if (it == row.end()) throw std::runtime_error(fmt::format("{} has no column '{}'", path, column));
  return it->second;
}

const std::string kPaperDoc = "docs/hwmodel-paper-table-estimate.md";

// The array-only model's speedup of BWMA over RWMA on the layer (RWMA time / BWMA time).
double layer_speedup(const Graph& g, const hw::NodeClasses& classes, hw::SystemDesc s, int64_t S, int64_t P) {
  s.array.kernel = S;
  s.cores = P;
  hw::EstimateOptions eo;
  eo.classes = &classes;
  double t[2] = {0, 0};
  for (hw::Arrangement a : {hw::Arrangement::rwma, hw::Arrangement::bwma})
    for (const auto& n : hw::estimate_graph(g, s, a, eo).nodes) t[a == hw::Arrangement::bwma] += n.seconds;
  return t[0] / t[1];
}

// The paper table's column of each cost's share of "graph speedup - 1" (lab.h's list).
const char* core_cost_column(la::CoreCost c) {
#define BERTLAB_LAB_CORE_COST_COLUMN(id, name, column) column,
  static constexpr std::array<const char*, enum_count<la::CoreCost>> kColumns{BERTLAB_LAB_CORE_COSTS(BERTLAB_LAB_CORE_COST_COLUMN)};
#undef BERTLAB_LAB_CORE_COST_COLUMN
  return kColumns.at(static_cast<size_t>(c));
}

// Part D: the student's two predictions of step 8 against the full model's table (the cost whose
// saved cycles are largest in size) and the array-only model's layer speedup at S = 8, one core.
// A failure says neither which nor how many are wrong (a count, one flip at a time, tells which):
// the line on the page and the numbers answer them.
Outcome check_full_model_prediction(Graph layer) {
  const std::string path = source_dir() + "/" + kPaperDoc;
  const auto row = paper_table_row(path, 8, 1);
  const double full = paper_column(row, "speedup graph", path);
  la::CoreCost most = la::CoreCost::instructions;
  for (la::CoreCost c : {la::CoreCost::l1_misses, la::CoreCost::llc_misses, la::CoreCost::page_walks})
    if (std::abs(paper_column(row, core_cost_column(c), path)) > std::abs(paper_column(row, core_cost_column(most), path)))
      most = c;
  const hw::SystemDesc base = hw::load_system(source_dir() + "/configs/systems/paper-ticsat-array.json");
  const double array_only = layer_speedup(layer, hw::classify_nodes(layer), base, 8, 1);
  working_on("full_model_prediction()");
  const la::FullModelPrediction p = la::full_model_prediction();
  const int wrong = int(p.changes_most != most) + int(p.larger_than_array_model != (full > array_only));
  if (wrong > 0)
    return failed("your 2 predictions are not both right yet; the full model's numbers are shown once both are right");
  return passed(fmt::format("both right: under the full model (whole graph, S = 8, 1 core) BWMA's speedup is {:.2f}x "
                            "against the array-only model's {:.2f}x on the layer, and {} change most ({:+.3f} of the "
                            "speedup - 1, {})",
                            full, array_only, to_string(most), paper_column(row, core_cost_column(most), path),
                            kPaperDoc));
}

// The student's predictions of step 7 (lab.h predicted_speedups), kept where the sweep has the
// same S and cores; the rest are listed in `ignored`.
std::vector<la::SpeedupGuess> usable_guesses(const std::vector<int64_t>& kernels, const std::vector<int64_t>& cores,
                                             std::string& ignored) {
  std::vector<la::SpeedupGuess> kept;
  for (const la::SpeedupGuess& g : la::predicted_speedups()) {
    const bool known = std::find(kernels.begin(), kernels.end(), g.S) != kernels.end() &&
                       std::find(cores.begin(), cores.end(), g.cores) != cores.end();
    if (known && std::isfinite(g.speedup) && g.speedup > 0)
      kept.push_back(g);
    else
      ignored += fmt::format(" (S {}, {} cores, {:g}x)", g.S, g.cores, g.speedup);
  }
  return kept;
}

// `show_full_model`: the student's step-8 predictions are right, so the full model's speedup
// (which answers them) may be drawn.
std::string sweep(const PlotPage& plots, const std::vector<int64_t>& kernels, const std::vector<int64_t>& cores,
                  bool show_full_model) {
  // The model's speedups answer step 7's questions (and step 6's, per op): they are drawn once
  // the student has written guesses for them.
  std::string ignored;
  const std::vector<la::SpeedupGuess> guesses = usable_guesses(kernels, cores, ignored);
  if (guesses.empty()) {
    plots.add("<h2>BWMA against RWMA on one BERT-base encoder layer</h2>\n<p class=\"skipped\">Not drawn yet: the "
              "model's speedups answer the questions of steps 6 and 7. Write your guesses for step 7 in "
              "<code>predicted_speedups()</code> (labs/arrangement/student.cpp), rebuild and run the grader again: the "
              "sweep is drawn with your guesses beside it.</p>\n" +
              (ignored.empty() ? std::string()
                               : "<p class=\"skipped\">Predictions left out (S must be one of the sweep's, cores one "
                                 "of its core counts, the speedup a positive number):" + html_escape(ignored) + "</p>\n"));
    return "shown once you write your step-7 guesses in predicted_speedups() (labs/arrangement/student.cpp)" +
           (ignored.empty() ? std::string() : "; left out (S, cores or speedup not in the sweep):" + ignored);
  }
  const Graph g = encoder_layer();
  const hw::NodeClasses classes = hw::classify_nodes(g);
  const hw::SystemDesc base = hw::load_system(source_dir() + "/configs/systems/paper-ticsat-array.json");
  std::vector<std::string> ops;
  for (const auto& n : g.nodes())
    if (std::find(ops.begin(), ops.end(), op_of(n.name)) == ops.end()) ops.push_back(op_of(n.name));
  // seconds[arrangement, S, P][op]; and the layer's compute and memory-stall milliseconds of the
  // busiest core, summed over its nodes (each node's time is the two added: overlap 0).
  std::map<std::tuple<hw::Arrangement, int64_t, int64_t>, std::map<std::string, double>> t;
  std::map<std::tuple<hw::Arrangement, int64_t, int64_t>, std::pair<double, double>> split;
  for (int64_t S : kernels)
    for (int64_t P : cores)
      for (hw::Arrangement a : {hw::Arrangement::rwma, hw::Arrangement::bwma}) {
        hw::SystemDesc s = base;
        s.array.kernel = S;
        s.cores = P;
        hw::EstimateOptions eo;
        eo.classes = &classes;
        const hw::GraphEstimate e = hw::estimate_graph(g, s, a, eo);
        auto& per_op = t[{a, S, P}];
        auto& [compute, memory] = split[{a, S, P}];
        for (const auto& n : e.nodes) {
          per_op[op_of(n.name)] += n.seconds;
          compute += n.compute_cycles / (s.clock_ghz * 1e6);
          memory += n.memory_cycles / (s.clock_ghz * 1e6);
        }
      }
  auto total = [&](hw::Arrangement a, int64_t S, int64_t P) {
    double x = 0;
    for (const auto& [op, sec] : t.at({a, S, P})) x += sec;
    return x;
  };
  // The speedup table, printed and drawn.
  std::string table = "layer speedup BWMA over RWMA (RWMA time / BWMA time):";
  std::vector<ChartSeries> lines;
  for (int64_t P : cores) {
    ChartSeries c{fmt::format("{} core(s)", P), {}, {}};
    for (int64_t S : kernels) {
      const double sp = total(hw::Arrangement::rwma, S, P) / total(hw::Arrangement::bwma, S, P);
      c.x.push_back(double(S));
      c.y.push_back(sp);
      table += fmt::format(" S={} P={}: {:.2f}x;", S, P, sp);
    }
    lines.push_back(c);
  }
  // The student's guesses beside the model's speedups, one series per core count guessed.
  std::string guesses_html;
  for (int64_t P : cores) {
    ChartSeries c{fmt::format("your guess, {} core(s)", P), {}, {}};
    for (const auto& gu : guesses)
      if (gu.cores == P) {
        c.x.push_back(double(gu.S));
        c.y.push_back(gu.speedup);
        const double sp = total(hw::Arrangement::rwma, gu.S, P) / total(hw::Arrangement::bwma, gu.S, P);
        guesses_html += fmt::format("<tr><td>S = {}, {} core(s)</td><td>{:.2f}x</td><td>{:.2f}x</td></tr>\n", gu.S, P,
                                    gu.speedup, sp);
        table += fmt::format(" your prediction at S={} P={}: {:.2f}x (model {:.2f}x);", gu.S, P, gu.speedup, sp);
      }
    if (!c.x.empty()) lines.push_back(c);
  }
  guesses_html = "<h3>Your predictions (step 7)</h3>\n<table><tr><th></th><th>you predicted</th><th>the "
                 "model</th></tr>\n" + guesses_html + "</table>\n";
  if (!ignored.empty())
    guesses_html += "<p class=\"skipped\">Predictions left out (S must be one of the sweep's, cores one of its core "
                    "counts, the speedup a positive number):" + html_escape(ignored) + "</p>\n";
  // Where BWMA starts losing, and, once step 8's predictions are right, the paper's configuration
  // under the full model, from the table `bertlab estimate --paper-table` wrote (not typed in here).
  std::vector<RefLine> refs = {{1.0, "1.0x: below, BWMA is slower"}};
  std::string refs_text = "The dashed line at 1.0x: below it, BWMA loses.";
  if (!show_full_model) {
    refs_text += " A second line, at the full core model's speedup (step 8), is drawn once your step-8 predictions "
                 "(<code>full_model_prediction()</code>) are right.";
  } else {
    try {
      const double paper = paper_column(paper_table_row(source_dir() + "/" + kPaperDoc, 8, 1), "speedup graph", kPaperDoc);
      refs.push_back({paper, fmt::format("full model, paper system, S = 8, 1 core: {:.2f}x", paper)});
      refs_text += " The second: the whole BERT-base graph's speedup under the full core model on the paper's system "
                   "at S = 8 and one core (the paper's setup), as <code>bertlab estimate --paper-table</code> wrote it "
                   "in <code>" + kPaperDoc + "</code> (step 8).";
    } catch (const std::exception& e) {
      guesses_html += "<p class=\"skipped\">No line at the full model's speedup: " + html_escape(e.what()) + "</p>\n";
    }
  }
  // Per op and the breakdown at the first core count, one cluster of bars per S.
  const int64_t P0 = cores.front();
  std::vector<std::string> groups;
  for (int64_t S : kernels) groups.push_back(fmt::format("S = {}", S));
  std::vector<ChartSeries> per_op;
  for (const auto& op : ops) {
    ChartSeries c{op, {}, {}};
    for (int64_t S : kernels)
      c.y.push_back(t.at({hw::Arrangement::rwma, S, P0}).at(op) / t.at({hw::Arrangement::bwma, S, P0}).at(op));
    per_op.push_back(c);
  }
  std::vector<ChartSeries> breakdown;
  for (hw::Arrangement a : {hw::Arrangement::rwma, hw::Arrangement::bwma})
    for (bool memory : {false, true}) {
      ChartSeries c{fmt::format("{} {}", hw::to_string(a), memory ? "memory stalls" : "compute"), {}, {}};
      for (int64_t S : kernels) {
        const auto& [cm, mm] = split.at({a, S, P0});
        c.y.push_back(memory ? mm : cm);
      }
      breakdown.push_back(c);
    }
  table += fmt::format(" busiest core's compute / memory stalls at {} core(s), ms:", P0);
  for (int64_t S : kernels)
    for (hw::Arrangement a : {hw::Arrangement::rwma, hw::Arrangement::bwma}) {
      const auto& [cm, mm] = split.at({a, S, P0});
      table += fmt::format(" S={} {} {:.0f} / {:.0f};", S, hw::to_string(a), cm, mm);
    }
  plots.add("<h2>BWMA against RWMA on one BERT-base encoder layer</h2>\n<p>The analytic model of <code>bertlab "
            "estimate</code> on the paper's system under the array-only model (configs/systems/paper-ticsat-array.json: int8, in-order cores with an "
            "S x S weight-stationary array each), one encoder layer of BERT-base, inference, batch 1, sequence "
            "512 (the paper's workload). " + refs_text + "</p>\n" +
            line_chart_html({"layer speedup of BWMA over RWMA", "kernel size S", "RWMA time / BWMA time", lines,
                             Scale::log, Scale::linear, refs}) +
            guesses_html +
            bar_chart_html({fmt::format("speedup per op ({} core(s)), bars from 1.0x", P0), "RWMA time / BWMA time",
                            groups, per_op, 1.0, {{1.0, "1.0x"}}}) +
            bar_chart_html({fmt::format("the layer's time: compute and memory stalls of the busiest core ({} core(s))", P0),
                            "ms", groups, breakdown}));
  return table;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 3 grader: the BWMA address function and the cache lines of a GEMM "
               "(labs/arrangement/student.cpp)"};
  std::string out = "out/labs";
  bool quick = false;
  app.add_option("--out", out, "Where the plots page goes");
  app.add_flag("--quick", quick, "Fewer shapes and a smaller sweep (the test suite)");
  std::string results_json;
  add_results_json_option(app, results_json);
  CLI11_PARSE(app, argc, argv);

  const std::vector<Shape2> shapes = {{7, 13}, {33, 5}, {1, 17}, {50, 31}, {16, 64}, {3, 100}};
  const std::vector<int64_t> kernels = {4, 8, 16, 32};
  const std::vector<la::Gemm> gemms = {{24, 128, 64, 8, 64}, {24, 128, 64, 16, 64}, {40, 64, 128, 32, 64},
                                 {17, 64, 64, 8, 32},  {9, 256, 64, 4, 64}};
  // M x K above the 16 KB LLC, M x S a multiple of the line (lab.h bwma_small_llc_reads).
  const std::vector<la::Gemm> small = {{64, 256, 256, 8, 64}, {128, 256, 128, 16, 64}, {48, 512, 64, 8, 32},
                                       {96, 384, 192, 32, 64}, {40, 1024, 32, 4, 32}};
  const std::vector<int64_t> cores = quick ? std::vector<int64_t>{1, 4} : std::vector<int64_t>{1, 2, 4};
  const std::vector<int64_t> sweep_kernels = quick ? std::vector<int64_t>{8, 32} : kernels;

  Grader g("arrangement: the BWMA layout and the cache lines of a GEMM", results_json);
  const PlotPage plots(out, "arrangement");
  // Hints say what to look at, not how to compute it.
  g.check("RWMA offsets", "the detail names the first wrong element: draw that matrix's rows in memory and count "
          "the elements before it",
          [&] { return offsets(hw::Arrangement::rwma, shapes, kernels); });
  g.check("BWMA offsets", "the detail names the first wrong element and S: draw that matrix's panels in memory, "
          "the last one too, and count the elements before it",
          [&] { return offsets(hw::Arrangement::bwma, shapes, kernels); });
  g.check("lines of one array step",
          "draw the first S columns of A, W and Y in memory under the failing layout, with the line boundaries; "
          "how far apart are two rows?",
          [&] { return hand_counts(gemms, true); });
  g.check("DRAM reads of a whole GEMM, cold cache large enough",
          "with room for everything, how often is each line read from DRAM?",
          [&] { return hand_counts(gemms, false); });
  const std::string small_llc_check = "BWMA DRAM reads of a whole GEMM, LLC too small";
  const bool small_llc_passed =
      g.check(small_llc_check, "between two uses of a line of A, how many other lines has the kernel touched?",
              [&] { return small_llc_counts(small); });
  // The same GEMM under both layouts: BWMA's counts are the answer to the check above.
  const std::string small_llc_info = "a GEMM with an LLC too small to keep A";
  if (small_llc_passed)
    g.info(small_llc_info, [&] { return small_llc({64, 256, 256, 8, 64}, kSmallLlc); });
  else
    g.withheld(small_llc_info, small_llc_check);
  const bool full_model_passed =
      g.check("your predictions for the full model (step 8)",
              "for each cost, ask what one array step pays under each arrangement: instructions per element, "
              "distinct lines, distinct pages; and compare with the layer speedups of step 7",
              [&] { return check_full_model_prediction(encoder_layer()); });
  g.info("S and cores on one BERT-base encoder layer (plots page)",
         [&] { return sweep(plots, sweep_kernels, cores, full_model_passed); });
  fmt::print("plots: {}\n", plots.write("Lab 3: data arrangement for accelerators").string());
  return g.finish();
}
