// bertlab graph: writes the op graph of a BERT run as JSON (schema: docs/graph-format.md).
#include <fmt/core.h>

#include <iostream>

#include "apps/commands.h"
#include "apps/common.h"
#include "runtime/bert_builder.h"
#include "runtime/fusion.h"

namespace bertlab::app {

void add_graph_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("graph", "Write the op graph of a BERT run as JSON");
  auto opts = std::make_shared<ModelShapeOptions>();
  add_model_shape_options(*cmd, *opts);
  auto out = std::make_shared<std::string>("-");
  cmd->add_option("-o,--output", *out, "Output file ('-' for standard output)");
  cmd->callback([opts, out] {
    Graph g = build_graph(*opts);
    write_text_atomically(*out, graph_to_json(g).dump(1) + "\n");
  });
}

}  // namespace bertlab::app
