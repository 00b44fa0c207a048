#include "apps/common.h"

#include <csignal>

#include <cmath>

#include <omp.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "base/file_util.h"
#include "base/error.h"
#include "ops/isa.h"
#include "ops/peak.h"
#include "runtime/fusion.h"

namespace bertlab::app {

namespace {
CLI::Validator number_at_least(double lo, bool strict, const char* words) {
  return CLI::Validator(
      [=](std::string& v) -> std::string {
        double x = 0;
        size_t used = 0;
        try {
          x = std::stod(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == v.size() && !v.empty() && std::isfinite(x) && (strict ? x > lo : x >= lo)) return "";
        return fmt::format("expected {}, got '{}'", words, v);
      },
      strict ? "POSITIVE" : "NONNEGATIVE");
}
}  // namespace

CLI::Validator positive_number() { return number_at_least(0, true, "a number above 0"); }
CLI::Validator non_negative_number() { return number_at_least(0, false, "a number of 0 or more"); }

void add_model_shape_options(CLI::App& cmd, ModelShapeOptions& o) {
  cmd.add_option("--config,--model", o.config, "config.json or a model directory")->required();
  cmd.add_option("--batch", o.batch, "Batch size")->check(positive_number());
  cmd.add_option("--seq", o.seq, "Sequence length")->check(positive_number());
  add_enum_option(cmd, "--mode", o.mode, "infer or train");
  add_enum_option(cmd, "--heads", o.heads, "pretraining (MLM + NSP) or none (encoder and pooler)",
                  {Heads::pretraining, Heads::none});
  cmd.add_option("--no-fuse", o.no_fuse, "Switch off a fusion pass (repeatable)");
  add_precision_option(cmd, o.precision);
  cmd.add_option("--world-size", o.world_size,
                 "Data-parallel ranks the training graph is built for (> 1: a gradient allreduce node)")
      ->check(positive_number());
  cmd.add_flag("--no-nsp{false}", o.nsp, "Training graph of the masked LM alone (as train --no-nsp)");
}

Precision parse_precision(const std::string& s, const std::string& what, std::string* note) {
  if (s != "auto") return precision_from_string(s, what);
  if (ops::cpu_has_bf16()) return Precision::bf16;
  if (note) *note = fmt::format("{} auto: fp32, since {}", what, ops::bf16_unavailable_reason());
  return Precision::fp32;
}

void add_precision_option(CLI::App& cmd, Precision& precision) {
  cmd.add_option_function<std::string>(
         "--precision",
         [&precision](const std::string& s) {
           std::string note;
           precision = parse_precision(s, "--precision", &note);
           if (!note.empty()) fmt::print(stderr, "bertlab: {}\n", note);
         },
         "fp32, or bf16: GEMMs on bf16 copies of their inputs, f32 accumulation (mixed precision); "
         "auto: bf16 when the CPU has a native bf16 matmul (avx512_bf16 or AMX), else fp32")
      ->check(CLI::IsMember({"fp32", "bf16", "auto"}));
}

BertConfig resolve_config(const std::string& path) {
  std::filesystem::path p(path);
  if (std::filesystem::is_directory(p)) p /= "config.json";
  return load_config(p);
}

Heads graph_heads(const ModelShapeOptions& o) {
  return o.heads == Heads::none && o.mode != RunMode::train ? Heads::none : Heads::pretraining;
}

Graph build_graph(const ModelShapeOptions& o) {
  RunSpec run;
  run.batch = o.batch;
  run.seq = o.seq;
  run.mode = o.mode;
  run.precision = o.precision;
  run.world_size = o.world_size;
  run.nsp = o.nsp;
  run.heads = graph_heads(o);
  Graph g = build_bert(resolve_config(o.config), run);
  apply_fusions(g, std::set<std::string>(o.no_fuse.begin(), o.no_fuse.end()));
  return g;
}

void add_threads_option(CLI::App& cmd, int& threads, const char* help) {
  cmd.add_option("--threads", threads, help)->check(positive_number());
}

void set_threads(int threads) {
  // Each thread gets a stack and oneDNN scratch; 100,000 of them crash the process.
  check(threads <= kMaxThreads, "--threads {} is more than the {} bertlab supports", threads, kMaxThreads);
  if (threads <= 0) threads = omp_get_num_procs();
  omp_set_num_threads(threads);
}

int omp_threads() { return omp_get_max_threads(); }

void add_nonfinite_options(CLI::App& cmd, NonfinitePolicy& policy, std::string& action,
                           std::vector<std::string>& inject) {
  cmd.add_option("--on-nonfinite", action,
                 "When a step's loss or gradients are not finite: stop (default), skip (leave the micro-batches at "
                 "fault out of the step's update, or drop the update when all are; at most --nonfinite-limit "
                 "micro-batches in --nonfinite-window steps) or rollback (to the newest checkpoint, past the data "
                 "batches since it; at most --nonfinite-limit times; needs --save-steps)")
      ->capture_default_str();
  cmd.add_option("--nonfinite-limit", policy.limit,
                 "Micro-batches left out per window (a step skipped whole counts all of its), or rollbacks per run")
      ->check(positive_number())->capture_default_str();
  cmd.add_option("--nonfinite-window", policy.window, "Steps of the window that --nonfinite-limit counts skips in")
      ->check(positive_number())->capture_default_str();
  // A test hook (hidden): STEP[:MICRO[:loss|grad]], the data batches of these steps in the
  // original order (or one micro-batch of them) give a non-finite loss (or only gradients).
  cmd.add_option("--debug-nonfinite-batch", inject)->group("")->delimiter(',');
}

void parse_nonfinite_options(const std::string& action, const std::vector<std::string>& inject,
                             NonfinitePolicy& policy) {
  policy.action = on_nonfinite_from_string(action, "--on-nonfinite");
  policy.inject.clear();
  for (const auto& s : inject) policy.inject.push_back(nonfinite_injection_from_string(s, "--debug-nonfinite-batch"));
}

namespace {
std::atomic<bool> g_stop{false};
extern "C" void request_stop(int) { g_stop.store(true); }
}  // namespace

const std::atomic<bool>* stop_on_signals() {
  g_stop.store(false);
  std::signal(SIGINT, request_stop);
  std::signal(SIGTERM, request_stop);
  return &g_stop;
}

void stop_at_next_step() { g_stop.store(true); }
bool stop_requested() { return g_stop.load(); }

namespace {
std::function<void(const StepReport&)> g_step_observer;
}  // namespace

void set_step_observer(std::function<void(const StepReport&)> observer) { g_step_observer = std::move(observer); }

void report_step(const StepReport& r) {
  if (g_step_observer) g_step_observer(r);
}

namespace {
std::string g_json_sink_path;
JsonSink g_json_sink;
}  // namespace

void set_json_sink(std::string path, JsonSink sink) {
  g_json_sink_path = std::move(path);
  g_json_sink = std::move(sink);
}

void write_json_output(const std::string& path, const nlohmann::json& doc) {
  if (g_json_sink && path == g_json_sink_path) return g_json_sink(doc);
  write_text_atomically(path, doc.dump(1) + "\n");
}

void write_text_atomically(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::cout << text;
    return;
  }
  write_file_atomic(path, text);
}

}  // namespace bertlab::app
