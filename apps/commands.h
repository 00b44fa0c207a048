#pragma once
// Each subcommand lives in its own file and adds itself to the root app here.
// Subcommand callbacks throw bertlab::Error on bad input; main() prints it and exits 1.
#include <CLI/CLI.hpp>

namespace bertlab::app {

void add_graph_command(CLI::App& root);




}  // namespace bertlab::app
