#pragma once
// Each subcommand lives in its own file and adds itself to the root app here.
// Subcommand callbacks throw bertlab::Error on bad input; main() prints it and exits 1.
#include <CLI/CLI.hpp>

namespace bertlab::app {

void add_graph_command(CLI::App& root);
void add_infer_command(CLI::App& root);
void add_train_command(CLI::App& root);
void add_bench_command(CLI::App& root);
void add_init_command(CLI::App& root);
void add_tokenize_command(CLI::App& root);
void add_vocab_command(CLI::App& root);
void add_prepare_command(CLI::App& root);
void add_estimate_command(CLI::App& root);
void add_calibrate_command(CLI::App& root);
void add_profile_command(CLI::App& root);
void add_finetune_command(CLI::App& root);
void add_predict_command(CLI::App& root);
void add_lab_command(CLI::App& root);
void add_isa_command(CLI::App& root);
void add_report_command(CLI::App& root);

// All of the above, in the order --help lists them (main.cpp, and the Python module's
// in-process runs).
void add_all_commands(CLI::App& root);




}  // namespace bertlab::app
