// The subcommands of bertlab, in one list.
#include "apps/commands.h"

namespace bertlab::app {

void add_all_commands(CLI::App& root) {
  add_graph_command(root);
  add_infer_command(root);
  add_train_command(root);
  add_bench_command(root);
  add_init_command(root);
  add_tokenize_command(root);
  add_vocab_command(root);
  add_prepare_command(root);
  add_estimate_command(root);
  add_calibrate_command(root);
  add_profile_command(root);
  add_report_command(root);
  add_finetune_command(root);
  add_predict_command(root);
  add_lab_command(root);
  add_isa_command(root);
}

}  // namespace bertlab::app
