#pragma once
// Options and helpers shared by several subcommands.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <atomic>
#include <functional>
#include <utility>
#include <memory>
#include <string>
#include <vector>

#include "runtime/bert_builder.h"
#include "runtime/run_loop.h"

namespace bertlab::app {

// --config/--model, --batch, --seq, --mode, --heads, --no-fuse, --precision: what a graph is
// built from.
struct ModelShapeOptions {
  std::string config;  // a config.json, or a model directory holding one
  int64_t batch = 1;
  int64_t seq = 128;
  RunMode mode = RunMode::infer;
  Heads heads = Heads::pretraining;  // --heads: pretraining or none (inference graphs)
  std::vector<std::string> no_fuse;
  Precision precision = Precision::fp32;  // GEMM inputs
  int64_t world_size = 1;          // data-parallel ranks (training graphs: gradient allreduce)
  bool nsp = true;                 // false: masked LM only (training graphs, as train --no-nsp)
};
void add_model_shape_options(CLI::App& cmd, ModelShapeOptions& o);
// The heads of the graph build_graph(o) makes, and so of the model it runs on: --heads, except
// that training always has the pretraining heads (the losses live there).
Heads graph_heads(const ModelShapeOptions& o);

// Every value of enum E (base/enum_table.h), in declaration order.
template <typename E>
std::vector<E> enum_values() {
  std::vector<E> v;
  for (size_t i = 0; i < enum_count<E>; ++i) v.push_back(static_cast<E>(i));
  return v;
}
// A flag taking the name of one of `accepted` (default: every value of E) into `value`, parsed
// once: CLI11 checks the name against theirs (the help shows {a,b}, a bad value's error lists
// them), then it is read into the enum.
template <typename E>
CLI::Option* add_enum_option(CLI::App& cmd, const std::string& flag, E& value, const std::string& help,
                             const std::vector<E>& accepted = enum_values<E>()) {
  std::vector<std::string> names;
  for (const E e : accepted) names.emplace_back(to_string(e));
  return cmd
      .add_option_function<std::string>(
          flag, [&value, flag](const std::string& s) { value = enum_from_string<E>(s, flag); }, help)
      ->check(CLI::IsMember(names));
}
// fp32, bf16, or auto: bf16 when the CPU has a native bf16 matmul; `note` (when given) receives
// why auto chose fp32. Throws Error naming `what` for anything else.
Precision parse_precision(const std::string& s, const std::string& what, std::string* note);
// --precision fp32|bf16|auto (also used by infer and train).
void add_precision_option(CLI::App& cmd, Precision& precision);
BertConfig resolve_config(const std::string& config_or_model_dir);
Graph build_graph(const ModelShapeOptions& o);

// --threads: the one place the compute thread count is set (OpenMP, used by oneDNN too).
void add_threads_option(CLI::App& cmd, int& threads,
                        const char* help = "Compute threads (default: all cores)");
inline constexpr int kMaxThreads = 1024;
void set_threads(int threads);
int omp_threads();  // the thread count in force

// CLI11 checks of a number, with the expectation in words (CLI11 puts the flag's name in
// front): "--max-steps: expected a number above 0, got '0'". They replace CLI::PositiveNumber
// and CLI::NonNegativeNumber, whose message prints the range up to 1.8e308 in full.
CLI::Validator positive_number();
CLI::Validator non_negative_number();

// --on-nonfinite stop|skip|rollback, --nonfinite-limit, --nonfinite-window and the hidden test
// hook --debug-nonfinite-batch STEP[:MICRO[:loss|grad]] (train and finetune). The action and the
// hook are parsed into `policy` by parse_nonfinite_options in the command's callback.
void add_nonfinite_options(CLI::App& cmd, NonfinitePolicy& policy, std::string& action,
                           std::vector<std::string>& inject);
void parse_nonfinite_options(const std::string& action, const std::vector<std::string>& inject,
                             NonfinitePolicy& policy);

// From now on SIGINT and SIGTERM set the returned flag (cleared here), which training polls once
// per step.
const std::atomic<bool>* stop_on_signals();
// Sets that flag as a signal would: training stops after the step it is in, with a checkpoint.
void stop_at_next_step();
bool stop_requested();  // whether that flag is set

// A training step as train and finetune log it, for a front end that runs them in-process (the
// Python module's callback and progress bar). `logged`: a --log-steps step (or the last).
struct StepReport {
  int64_t step = 0, max_steps = 0;
  double loss = 0, lr = 0, seq_per_s = 0;
  std::vector<std::pair<std::string, double>> metrics;  // train: mlm_loss, nsp_loss, mlm_accuracy; finetune: accuracy
  bool logged = false;
};
// One observer for the process (empty: none, the default); train and finetune call it after
// every step, on their own thread.
void set_step_observer(std::function<void(const StepReport&)> observer);
void report_step(const StepReport& r);

// Writes to a temporary file beside `path` and renames it; "-" writes to standard output.
void write_text_atomically(const std::string& path, const std::string& text);

// A command's --json document: written to `path` (dump(1), atomically), or, when a front end
// has set a sink for exactly that path, handed to it as it is (the Python module takes the
// records as objects instead of text to parse back).
void write_json_output(const std::string& path, const nlohmann::json& doc);
using JsonSink = std::function<void(const nlohmann::json& doc)>;
void set_json_sink(std::string path, JsonSink sink);  // an empty sink: none

}  // namespace bertlab::app
