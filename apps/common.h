#pragma once
// Options and helpers shared by several subcommands.
#include <CLI/CLI.hpp>
#include <atomic>
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
  std::string mode = "infer";
  std::string heads = "pretraining";
  std::vector<std::string> no_fuse;
  Precision precision = Precision::fp32;  // GEMM inputs
  int64_t world_size = 1;          // data-parallel ranks (training graphs: gradient allreduce)
  bool nsp = true;                 // false: masked LM only (training graphs, as train --no-nsp)
};
void add_model_shape_options(CLI::App& cmd, ModelShapeOptions& o);
// --precision fp32|bf16 (also used by infer and train).
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

// From now on SIGINT and SIGTERM set the returned flag, which training polls once per step.
const std::atomic<bool>* stop_on_signals();

// Writes to a temporary file beside `path` and renames it; "-" writes to standard output.
void write_text_atomically(const std::string& path, const std::string& text);

}  // namespace bertlab::app
