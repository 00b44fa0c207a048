// bertlab init: writes a model directory initialised like BERT from a config.
#include <fmt/core.h>

#include "apps/commands.h"
#include "apps/common.h"
#include "runtime/checkpoint.h"
#include "base/error.h"
#include "runtime/model.h"

namespace bertlab::app {

void add_init_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("init", "Write a freshly initialised model directory");
  auto config = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto seed = std::make_shared<uint64_t>(0);
  auto overwrite = std::make_shared<bool>(false);
  cmd->add_option("--config", *config, "config.json")->required();
  cmd->add_option("--out", *out, "Model directory to create")->required();
  cmd->add_option("--seed", *seed, "Random seed");
  cmd->add_flag("--overwrite", *overwrite, "Replace an existing model directory");
  cmd->callback([=] {
    check(*overwrite || !std::filesystem::exists(*out),
          "{} already exists (use --overwrite to replace it)", *out);
    BertConfig c = resolve_config(*config);
    Model m = init_model(c, Heads::pretraining, *seed);
    save_model_dir(*out, c, m.params);
    fmt::print(stderr, "wrote {} ({} parameters)\n", *out, m.params.count());
  });
}

}  // namespace bertlab::app
