#include "apps/python/infer_session.h"

#include <fmt/core.h>

#include <set>

#include "apps/common.h"
#include "base/json_file.h"
#include "runtime/checkpoint.h"
#include "runtime/bert_builder.h"
#include "runtime/finetune.h"
#include "runtime/fusion.h"

namespace bertlab::python {

namespace {
constexpr std::size_t kKeep = 2;  // executors kept: a call while the previous outputs live reuses neither
}  // namespace

struct InferSession::Runner {
  std::shared_ptr<Model> model;  // the executor reads its parameters
  int64_t batch, seq;
  Executor executor;
  Runner(std::shared_ptr<Model> m, int64_t b, int64_t s, Graph g)
      : model(std::move(m)), batch(b), seq(s), executor(std::move(g), model->params) {}
};

InferSession::InferSession(const std::filesystem::path& dir, Precision precision, int threads,
                           std::vector<std::string> no_fuse, bool encoder_only)
    : precision_(precision), threads_(threads), no_fuse_(std::move(no_fuse)) {
  const Heads heads = finetuned_heads(dir);
  if (heads == Heads::none) {
    model_ = std::make_shared<Model>(load_model(dir, Heads::pretraining));
  } else {
    const auto file = dir / "config.json";
    const auto cfg = read_json_file(file, "model config");
    check(cfg.contains("id2label") && cfg["id2label"].is_object() && !cfg["id2label"].empty(),
          "{}: a fine-tuned model's config needs a non-empty 'id2label'", file.string());
    num_labels_ = static_cast<int64_t>(cfg["id2label"].size());
    model_ = std::make_shared<Model>(init_model(load_config(file), heads, 0, num_labels_));
    check(std::filesystem::exists(dir / "model.safetensors"), "model directory {} has no model.safetensors",
          dir.string());
    model_->unused_tensors = load_hf_weights(model_->params, SafetensorsFile(dir / "model.safetensors"));
    model_->from_checkpoint = true;
  }
  run_heads_ = encoder_only ? Heads::none : model_->heads;
  if (!model_->from_checkpoint)
    notes_.push_back(fmt::format("{} has no model.safetensors; weights initialised like BERT (seed 0)", dir.string()));
  for (const auto& name : model_->unused_tensors)
    notes_.push_back(fmt::format("checkpoint tensor '{}' was not used", name));
}

InferSession::~InferSession() = default;

std::shared_ptr<InferSession::Runner> InferSession::runner_for(int64_t batch, int64_t seq) {
  // use_count 1: only this list holds it, so no output of an earlier call points into it.
  for (auto& r : runners_)
    if (r.use_count() == 1 && r->batch == batch && r->seq == seq) return r;
  RunSpec run;
  run.batch = batch, run.seq = seq, run.precision = precision_, run.heads = run_heads_, run.num_labels = num_labels_;
  Graph g = build_bert(model_->config, run);
  apply_fusions(g, std::set<std::string>(no_fuse_.begin(), no_fuse_.end()));
  auto r = std::make_shared<Runner>(model_, batch, seq, std::move(g));
  // Forget the oldest beyond kKeep (a lent one lives on in its outputs).
  runners_.insert(runners_.begin(), r);
  if (runners_.size() > kKeep) runners_.pop_back();
  return r;
}

std::vector<InferOutput> InferSession::run(const BertInputs& in) {
  std::lock_guard lock(mutex_);
  app::set_threads(threads_);  // OpenMP's thread count belongs to the calling thread
  auto r = runner_for(in.batch, in.seq);
  set_inputs(r->executor, in);
  r->executor.run();
  std::vector<InferOutput> outs;
  for (const auto& [name, tensor] : r->executor.graph().outputs()) {
    InferOutput o;
    o.name = name;
    for (auto d : r->executor.output_shape(name)) o.shape.push_back(d);
    o.data = const_cast<float*>(r->executor.output(name));
    o.owner = r;
    outs.push_back(std::move(o));
  }
  return outs;
}

}  // namespace bertlab::python
