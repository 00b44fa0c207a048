// bertlab infer: runs a model directory on a JSON batch and writes every output as safetensors.
#include <fmt/core.h>

#include <fstream>
#include <set>

#include "apps/commands.h"
#include "apps/common.h"
#include "runtime/bert_builder.h"
#include "base/error.h"
#include "base/json_file.h"
#include "runtime/fusion.h"
#include "runtime/model.h"
#include "runtime/safetensors.h"

namespace bertlab::app {

namespace {
struct InferOptions {
  std::string model, input, output;
  std::vector<std::string> no_fuse;
  Precision precision = Precision::fp32;
  int threads = 0;
};
}  // namespace

void add_infer_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("infer", "Run BERT (MLM + NSP heads) on a batch of sequences");
  auto o = std::make_shared<InferOptions>();
  cmd->add_option("--model", o->model, "Model directory (config.json [+ model.safetensors])")->required();
  cmd->add_option("--input", o->input, "JSON with input_ids, token_type_ids, attention_mask")->required();
  cmd->add_option("--output", o->output, "Output safetensors file")->required();
  cmd->add_option("--no-fuse", o->no_fuse, "Switch off a fusion pass (repeatable)");
  add_precision_option(*cmd, o->precision);
  add_threads_option(*cmd, o->threads);
  cmd->callback([o] {
    set_threads(o->threads);
    Model m = load_model(o->model, Heads::pretraining);
    if (!m.from_checkpoint)
      fmt::print(stderr, "note: {} has no model.safetensors; weights initialised like BERT (seed 0)\n", o->model);
    for (const auto& name : m.unused_tensors)
      fmt::print(stderr, "note: checkpoint tensor '{}' was not used\n", name);

    BertInputs batch = inputs_from_json(read_json_file(o->input, "input file"), o->input);
    validate_inputs(batch, m.config, o->input);

    RunSpec run;
    run.batch = batch.batch;
    run.seq = batch.seq;
    run.precision = o->precision;
    Graph g = build_bert(m.config, run);
    apply_fusions(g, std::set<std::string>(o->no_fuse.begin(), o->no_fuse.end()));
    Executor ex(std::move(g), m.params);
    set_inputs(ex, batch);
    ex.run();

    std::vector<SafetensorWrite> outs;
    for (const char* name : {"last_hidden_state", "pooler_output", "mlm_logits", "nsp_logits"})
      outs.push_back({name, "F32", ex.output_shape(name), ex.output(name)});
    write_safetensors(o->output, outs);
    fmt::print(stderr, "wrote {} ({} sequences of length {})\n", o->output, batch.batch, batch.seq);
  });
}

}  // namespace bertlab::app
