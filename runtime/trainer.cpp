#include "runtime/trainer.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>

#include "base/error.h"
#include "base/file_util.h"
#include "runtime/checkpoint.h"
#include "data/context_yardsticks.h"
#include "data/shard.h"
#include "runtime/distributed.h"

namespace bertlab {

namespace fs = std::filesystem;

LrScheduleOptions lr_schedule(const TrainOptions& o) {
  return {o.lr, o.max_steps, o.warmup_steps, o.schedule, o.decay_steps, o.decay_ratio, o.min_lr_ratio, o.power};
}

int64_t wsd_decay_steps(const TrainOptions& o) { return wsd_decay_steps(lr_schedule(o)); }
void check_lr_schedule(const TrainOptions& o) { check_lr_schedule(lr_schedule(o)); }
float learning_rate(const TrainOptions& o, int64_t step) { return learning_rate(lr_schedule(o), step); }

double masked_lm_prob_at(const TrainOptions& o, int64_t step) {
  if (o.masked_lm_prob_final == 0 || o.max_steps <= 1) return o.masked_lm_prob;
  const double f = std::clamp(static_cast<double>(step - 1) / static_cast<double>(o.max_steps - 1), 0.0, 1.0);
  return o.masked_lm_prob + (o.masked_lm_prob_final - o.masked_lm_prob) * f;
}

namespace {

BertInputs to_inputs(const data::Batch& b) {
  BertInputs in;
  in.batch = static_cast<int64_t>(b.batch_size);
  in.seq = static_cast<int64_t>(b.seq_len);
  in.input_ids = b.input_ids;
  in.token_type_ids = b.token_type_ids;
  in.attention_mask = b.attention_mask;
  in.max_predictions = static_cast<int64_t>(b.max_predictions);
  in.masked_lm_positions = b.masked_lm_positions;
  in.masked_lm_labels.resize(b.masked_lm_ids.size());
  for (size_t i = 0; i < b.masked_lm_ids.size(); ++i)
    in.masked_lm_labels[i] = b.masked_lm_weights[i] > 0 ? b.masked_lm_ids[i] : -100;
  in.next_sentence_labels = b.next_sentence_labels;
  return in;
}

// Instances in the order training reads them: epoch after epoch, each shuffled by (seed, epoch).
class InstanceStream {
 public:
  explicit InstanceStream(const data::PretrainingDataset& ds) : ds_(ds) {}
  // masked_lm_prob: the dynamic masking rate (0: the data's).
  data::Batch batch(uint64_t first, size_t count, double masked_lm_prob) {
    std::vector<size_t> indices;
    size_t epoch = 0;
    for (uint64_t i = first; i < first + count; ++i) {
      epoch = static_cast<size_t>(i / ds_.size());
      if (epoch != cached_epoch_) order_ = ds_.epoch_order(epoch), cached_epoch_ = epoch;
      indices.push_back(order_[i % ds_.size()]);
    }
    data::Batch b;
    ds_.fill_batch(indices, epoch, b, masked_lm_prob);  // dynamic masks of the epoch of the batch's last instance
    return b;
  }

 private:
  const data::PretrainingDataset& ds_;
  std::vector<size_t> order_;
  size_t cached_epoch_ = SIZE_MAX;
};

// The held-out losses and accuracy of the first `max_batches` batches of `eval`, and the
// accuracy of always predicting their most frequent label (`baseline`). With `yardsticks`, the
// plateau diagnostics of the same batches too (`plateau`).
StepStats evaluate(TrainStepper& stepper, const data::PretrainingDataset& eval, int64_t batch_size,
                   int64_t max_batches, double& baseline, const data::ContextYardsticks* yardsticks,
                   std::optional<PlateauDiagnostics>& plateau) {
  const int64_t B = std::min<int64_t>(batch_size, static_cast<int64_t>(eval.size()));
  const int64_t batches = std::min<int64_t>(max_batches, static_cast<int64_t>(eval.size()) / B);
  StepStats total;
  std::map<int32_t, int64_t> label_counts;
  data::YardstickHits hits;
  RepresentationSums representation;
  for (int64_t k = 0; k < batches; ++k) {
    std::vector<size_t> idx(B);
    for (int64_t i = 0; i < B; ++i) idx[i] = static_cast<size_t>(k * B + i);
    data::Batch b;
    eval.fill_batch(idx, 0, b);
    BertInputs in = to_inputs(b);
    for (int32_t l : in.masked_lm_labels)
      if (l != -100) ++label_counts[l];
    if (yardsticks) hits += yardsticks->score(b);
    StepStats s = stepper.evaluate(in, yardsticks ? &representation : nullptr);
    total.mlm_loss += s.mlm_loss * s.masked, total.mlm_accuracy += s.mlm_accuracy * s.masked;
    total.nsp_loss += s.nsp_loss * s.sequences;
    total.masked += s.masked, total.sequences += s.sequences;
  }
  int64_t most = 0;
  for (auto& [label, n] : label_counts) most = std::max(most, n);
  baseline = total.masked ? double(most) / total.masked : 0;
  if (total.masked) total.mlm_loss /= total.masked, total.mlm_accuracy /= total.masked;
  if (total.sequences) total.nsp_loss /= total.sequences;
  plateau.reset();
  if (yardsticks)
    plateau = PlateauDiagnostics{hits.accuracy(hits.left), hits.accuracy(hits.right), hits.accuracy(hits.both),
                                 representation.mean_cosine(), representation.mean_entropy(),
                                 representation.entropy_per_layer()};
  return total;
}

// The neighbour yardsticks' count tables, made once per run where evaluation happens (on TBB's
// threads, before the first step: no training step waits for them); reports their cost.
std::optional<data::ContextYardsticks> count_yardsticks(const data::PretrainingDataset& train_set, int64_t max_steps,
                                                        const std::function<void(const TrainEvent&)>& on_event) {
  const auto start = std::chrono::steady_clock::now();
  std::optional<data::ContextYardsticks> yardsticks(std::in_place, train_set);
  TrainEvent ev;
  ev.kind = TrainEvent::yardsticks;
  ev.max_steps = max_steps;
  ev.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ev.tokens = yardsticks->training_tokens();
  on_event(ev);
  return yardsticks;
}

// The eval line of metrics.jsonl.
nlohmann::json eval_record(const TrainEvent& ev, bool nsp) {
  nlohmann::json line = {{"step", ev.step_index}, {"eval_loss", ev.stats.loss()},
                         {"eval_mlm_loss", ev.stats.mlm_loss},
                         {"eval_mlm_accuracy", ev.stats.mlm_accuracy},
                         {"eval_most_frequent_accuracy", ev.baseline_accuracy}};
  if (nsp) line["eval_nsp_loss"] = ev.stats.nsp_loss;  // masked LM only: no NSP field
  if (const auto& p = ev.plateau) {
    line["eval_left_neighbour_accuracy"] = p->left_accuracy;
    line["eval_right_neighbour_accuracy"] = p->right_accuracy;
    line["eval_both_neighbours_accuracy"] = p->both_accuracy;
    line["eval_hidden_cosine"] = p->hidden_cosine;
    line["eval_attention_entropy"] = p->attention_entropy;
    line["eval_attention_entropy_per_layer"] = p->attention_entropy_per_layer;
  }
  return line;
}

// Under mpirun every rank must train the same run: the same settings, model and data (ranks
// started with other flags or data would train apart, or wait forever in a collective once
// their step counts differ). Rank 0's settings go to all; a rank that differs stops the job.
void agree_across_ranks(dist::World& world, const nlohmann::json& run_state, const TrainOptions& o,
                        const BertConfig& config) {
  if (!world.distributed()) return;
  nlohmann::json mine = run_state;
  mine["max_steps"] = o.max_steps;
  mine["lr"] = o.lr;
  mine["warmup_steps"] = o.warmup_steps;
  mine["schedule"] = to_string(o.schedule);
  mine["decay_steps"] = wsd_decay_steps(o);
  mine["min_lr_ratio"] = o.min_lr_ratio;
  mine["precision"] = o.precision;
  mine["save_steps"] = o.save_steps;
  mine["eval_steps"] = o.eval_steps;
  mine["resume"] = o.resume.string();
  mine["config"] = config_to_json(config);
  const nlohmann::json root = nlohmann::json::parse(world.broadcast_text(mine.dump()));
  // Named settings first; the data fingerprint last (it differs whenever seq_len does).
  std::vector<std::string> keys;
  for (auto it = mine.begin(); it != mine.end(); ++it)
    if (it.key() != "data_fingerprint") keys.push_back(it.key());
  keys.push_back("data_fingerprint");
  for (const auto& key : keys) {
    const auto it = mine.find(key);
    check(root.contains(it.key()) && root[it.key()] == it.value(),
          "rank {} differs from rank 0: {} is {} here, {} on rank 0 (every rank must be started with the same "
          "flags, model and data)", world.rank(), it.key(), it.value().dump(),
          root.contains(it.key()) ? root[it.key()].dump() : "missing");
  }
}

// The model's config: from a checkpoint, a model directory or a config.json.
BertConfig model_config(const TrainOptions& o, const data::PretrainingDataset& train_set) {
  fs::path config_source = !o.resume.empty() ? o.resume : !o.model.empty() ? o.model : o.config;
  check(!config_source.empty(), "give --config, --model or --resume");
  BertConfig config = fs::is_directory(config_source) ? load_config(config_source / "config.json")
                                                      : load_config(config_source);
  // With --resume the model comes from the checkpoint; a --config or --model given as well
  // must describe the same model, not be silently ignored.
  if (!o.resume.empty())
    for (const auto& given : {o.config, o.model})
      if (!given.empty())
        check_same_model(config, fs::is_directory(given) ? load_config(given / "config.json") : load_config(given),
                         o.resume, given == o.config);
  // A new model takes its vocabulary size from the data, as run_mlm.py resizes embeddings to
  // the tokenizer.
  if (o.model.empty() && o.resume.empty()) config.vocab_size = static_cast<int64_t>(train_set.vocab_size());
  return config;
}

// The held-out data (rank 0 only), opened before training, so that data that cannot be
// evaluated with this model is refused now rather than at the first evaluation.
std::optional<data::PretrainingDataset> open_eval_set(const TrainOptions& o, const BertConfig& config, bool writer) {
  std::optional<data::PretrainingDataset> eval_set;
  const fs::path eval_dir = o.eval_data.empty() ? o.data : o.eval_data;
  if (writer) {
    eval_set.emplace(eval_dir, "eval", data::PretrainingDataset::Options{false, o.seed});
    if (!o.eval_data.empty()) {
      check(read_file(o.eval_data / "vocab.txt") == read_file(o.data / "vocab.txt"),
            "--eval-data {}: its vocabulary ({}) differs from the training data's ({})", o.eval_data.string(),
            (o.eval_data / "vocab.txt").string(), (o.data / "vocab.txt").string());
      check(static_cast<int64_t>(eval_set->seq_len()) <= config.max_position_embeddings,
            "--eval-data {}: sequence length {} exceeds max_position_embeddings {}", o.eval_data.string(),
            eval_set->seq_len(), config.max_position_embeddings);
    }
  }
  return eval_set;
}

// The recipe settings recorded in trainer_state.json, with the values of a run without them
// (checkpoints from before them had none of them).
nlohmann::json recipe_state_defaults() {
  return {{"position_init", to_string(PositionInit::normal)}, {"position_init_scale", 0.0},
          {"position_lr_scale", 1.0}, {"position_lr_steps", 0}, {"masked_lm_prob", 0.0}, {"masked_lm_prob_final", 0.0},
          {"residual_scale", 1.0}, {"seq_len_warmup_steps", 0}, {"seq_len_warmup_len", 0}};
}

nlohmann::json recipe_state(const TrainOptions& o, const BertConfig& config) {
  const bool sinusoidal = o.position_init == PositionInit::sinusoidal;
  return {{"position_init", to_string(o.position_init)},
          {"position_init_scale", !sinusoidal ? 0.0 : o.position_init_scale > 0 ? o.position_init_scale
                                                                                : default_position_init_scale(config)},
          {"position_lr_scale", o.position_lr_steps > 0 ? o.position_lr_scale : 1.0},
          {"position_lr_steps", o.position_lr_scale != 1 ? o.position_lr_steps : 0},
          {"masked_lm_prob", o.masked_lm_prob}, {"masked_lm_prob_final", o.masked_lm_prob_final},
          {"residual_scale", o.residual_scale}, {"seq_len_warmup_steps", o.seq_len_warmup_steps},
          {"seq_len_warmup_len", o.seq_len_warmup_len}};
}

// Recipe flags that cannot work, before anything is read.
void check_recipe_options(const TrainOptions& o) {
  check(o.position_init_scale >= 0, "--position-init-scale {}: expected a non-negative amplitude", o.position_init_scale);
  check(o.position_init_scale == 0 || o.position_init == PositionInit::sinusoidal,
        "--position-init-scale belongs to --position-init sinusoidal");
  check(o.position_init == PositionInit::normal || o.model.empty(),
        "--position-init {}: the model of --model {} brings its own position table (the option is for a new model "
        "from --config)", to_string(o.position_init), o.model.string());
  check(o.position_lr_scale >= 0, "--position-lr-scale {}: expected a non-negative factor", o.position_lr_scale);
  check(o.position_lr_steps >= 0, "--position-lr-steps {}: expected a non-negative count", o.position_lr_steps);
  check(o.position_lr_scale == 1 || o.position_lr_steps > 0,
        "--position-lr-scale {} needs --position-lr-steps N (the steps it lasts)", o.position_lr_scale);
  for (const auto& [flag, p] : {std::pair{"--masked-lm-prob", o.masked_lm_prob}, {"--masked-lm-prob-final", o.masked_lm_prob_final}})
    check(p == 0 || (p > 0 && p < 1), "{} {}: expected a fraction in (0, 1)", flag, p);
  check(o.residual_scale > 0, "--residual-scale {}: expected a positive factor", o.residual_scale);
  check((o.seq_len_warmup_steps == 0) == (o.seq_len_warmup_len == 0) && o.seq_len_warmup_steps >= 0,
        "--seq-len-warmup {}:{}: expected STEPS:LEN, both positive", o.seq_len_warmup_steps, o.seq_len_warmup_len);
  check(o.masked_lm_prob_final == 0 || o.masked_lm_prob > 0,
        "--masked-lm-prob-final {} needs --masked-lm-prob (the rate it starts from)", o.masked_lm_prob_final);
  check(o.masked_lm_prob == 0 || o.dynamic_masking,
        "--masked-lm-prob {}: another masking rate than the data's needs --dynamic-masking (the masks of prepared data "
        "are fixed by prepare)", o.masked_lm_prob);
}

// Options that the training data cannot serve: NSP on packed data, another sequence length,
// a sequence-length warmup on pairs or to no shorter length.
void check_training_data(const TrainOptions& o, const data::PretrainingDataset& train_set) {
  const int64_t S = static_cast<int64_t>(train_set.seq_len());
  check(!o.nsp || !train_set.packed(),
        "{} was prepared with --pack (no sentence pairs for next-sentence prediction): train it with --no-nsp",
        o.data.string());
  check(o.seq_len == 0 || o.seq_len == S, "--seq-len {} differs from the data's sequence length {} ({})",
        o.seq_len, S, o.data.string());
  if (o.seq_len_warmup_steps > 0) {
    check(train_set.packed(), "--seq-len-warmup: {} was not prepared with --pack (truncating a sentence pair would cut "
          "its second segment)", o.data.string());
    check(o.seq_len_warmup_len < S, "--seq-len-warmup {}:{}: the length must be below the data's sequence length {}",
          o.seq_len_warmup_steps, o.seq_len_warmup_len, S);
    check(dist::World::get().size() == 1, "--seq-len-warmup: not available in a data-parallel run");
  }
}

// The model before training (a resume then loads the checkpoint's weights): new from the
// config, with the recipe's position table, or a model directory's BERT in the training form.
Model initial_model(const TrainOptions& o, const BertConfig& config, const nlohmann::json& recipe) {
  Model model = o.model.empty() ? init_model(config, Heads::pretraining, o.seed)
                                : load_model(o.model, Heads::pretraining, o.seed);
  if (o.position_init == PositionInit::sinusoidal)
    init_positions_sinusoidal(model.params, config, recipe["position_init_scale"].get<double>());
  // A model directory holds a plain BERT: the training form of the same function.
  if (!o.model.empty() && o.residual_scale != 1) scale_residual_branches(model.params, config, o.residual_scale);
  return model;
}

// Refuses a resume that could not continue the checkpoint's run exactly, naming the setting.
void check_resumable(nlohmann::json saved, const nlohmann::json& run_state, const TrainOptions& o) {
  saved.emplace("world_size", 1);  // checkpoints from before data parallelism
  saved.emplace("nsp", true);      // ... and before --no-nsp and --no-dropout
  saved.emplace("dropout", true);
  const nlohmann::json recipe_defaults = recipe_state_defaults();  // ... and the recipe flags
  for (const auto& [key, value] : recipe_defaults.items()) saved.emplace(key, value);
  check_resume_settings(saved, run_state, {"seed", "batch_size", "accum_steps", "seq_len", "optimizer",
                                           "dynamic_masking", "world_size", "nsp", "dropout"}, o.resume);
  for (const auto& [key, value] : recipe_defaults.items()) check_resume_settings(saved, run_state, {key.c_str()}, o.resume);
  // The same data, wherever it lives now (checkpoints from before fingerprints: not checked).
  if (saved.contains("data_fingerprint"))
    check(saved["data_fingerprint"] == run_state["data_fingerprint"],
          "cannot resume {} exactly: the training data differs: {} (fingerprint {}) is not the data the checkpoint "
          "was trained on ({}, fingerprint {})", o.resume.string(), o.data.string(),
          run_state["data_fingerprint"].dump(), saved.value("data", nlohmann::json("?")).dump(),
          saved["data_fingerprint"].dump());
}

// The model as a checkpoint holds it: a plain BERT (with --residual-scale A, G's output
// projections / A; the model itself when A is 1).
struct PlainBert {
  PlainBert(const Model& m, double residual_scale) : trained(m) {
    if (residual_scale == 1) return;
    folded.emplace(Model{m.config, m.heads, ParamStore::like(m.params), m.from_checkpoint, {}});
    std::copy_n(m.params.arena(), m.params.arena_size(), folded->params.arena());
    scale_residual_branches(folded->params, m.config, 1 / residual_scale);
  }
  const Model& get() const { return folded ? *folded : trained; }
  const Model& trained;
  std::optional<Model> folded;
};

// With --residual-scale, a checkpoint also holds the folded tensors as trained, so that a resume
// continues exactly whatever A (unfolding x A would round unless A is a power of two).
constexpr const char* kResidualForm = "residual_form.safetensors";

void save_training_form(const fs::path& dir, const Model& m, double residual_scale) {
  if (residual_scale == 1) return;
  std::vector<SafetensorWrite> tensors;
  for (const auto& name : residual_branch_outputs(m.config))
    tensors.push_back({name, "F32", m.params.info(name).shape, m.params.data(name)});
  write_safetensors(dir / kResidualForm, tensors, {{"format", "bertlab-residual-form"}});
}

// The weights and moments of a checkpoint, in the training form (--residual-scale: as trained).
void load_training_weights(const fs::path& dir, Model& m, TrainingState& s, double residual_scale) {
  load_checkpoint_weights(dir, m, s);
  if (residual_scale == 1) return;
  check(fs::exists(dir / kResidualForm), "{}: missing (a checkpoint of a run with --residual-scale {} has it)",
        (dir / kResidualForm).string(), residual_scale);
  SafetensorsFile form(dir / kResidualForm);
  for (const auto& name : residual_branch_outputs(m.config))
    form.read_f32(name, m.params.info(name).shape, m.params.data(name));
}

TrainEvent to_train_event(const LoopEvent& e, const fs::path& out) {
  TrainEvent ev;
  switch (e.kind) {
    case LoopEvent::checkpoint: ev.kind = TrainEvent::checkpoint; break;
    case LoopEvent::skipped: ev.kind = TrainEvent::skipped; break;
    case LoopEvent::dropped: ev.kind = TrainEvent::dropped; break;
    case LoopEvent::rolled_back: ev.kind = TrainEvent::rolled_back; break;
    case LoopEvent::interrupted: ev.kind = TrainEvent::interrupted; break;
  }
  ev.step_index = e.step;
  ev.path = e.path;
  ev.reason = e.reason;
  ev.text = loop_event_text(e, out);
  return ev;
}

// The options train() refuses before it reads anything.
void check_train_options(const TrainOptions& o) {
  check(o.batch_size > 0 && o.accum_steps > 0 && o.max_steps > 0,
        "--batch-size, --accum-steps and --max-steps must be positive");
  check(!o.out.empty(), "--out is required");
  check_lr_schedule(o);
  check_recipe_options(o);
  // Instance counters (step x accum x batch x ranks) must fit 64 bits.
  int64_t instances = 0;
  const int64_t W = dist::World::get().size();
  check(!__builtin_mul_overflow(o.max_steps, o.accum_steps, &instances) &&
            !__builtin_mul_overflow(instances, o.batch_size, &instances) &&
            !__builtin_mul_overflow(instances, W, &instances) && instances <= (int64_t{1} << 53),
        "--max-steps {} x --accum-steps {} x --batch-size {} x {} ranks is more than 2^53 instances",
        o.max_steps, o.accum_steps, o.batch_size, W);
}

// The training graph's settings: the data's shape, the precision, the ranks and the recipe.
RunSpec train_run_spec(const TrainOptions& o, const data::PretrainingDataset& train_set, int64_t W) {
  RunSpec run;
  run.batch = o.batch_size;
  run.seq = static_cast<int64_t>(train_set.seq_len());
  run.max_predictions = static_cast<int64_t>(train_set.max_predictions());
  run.precision = o.precision;
  run.world_size = W;
  run.allreduce = o.allreduce;
  run.nsp = o.nsp;
  run.dropout = o.dropout;
  run.residual_scale = o.residual_scale;
  return run;
}

// The settings a resume must share with the checkpoint (trainer_state.json), the recipe's too.
nlohmann::json train_run_state(const TrainOptions& o, const data::PretrainingDataset& train_set, int64_t W,
                               const nlohmann::json& recipe) {
  nlohmann::json run_state = trainer_state_header(RunKind::pretraining);
  run_state.update({{"seed", o.seed},               {"batch_size", o.batch_size},
                    {"accum_steps", o.accum_steps}, {"seq_len", static_cast<int64_t>(train_set.seq_len())},
                    {"optimizer", to_string(o.optimizer.kind)}, {"dynamic_masking", o.dynamic_masking},
                    {"world_size", W},              {"nsp", o.nsp},
                    {"dropout", o.dropout},
                    {"data_fingerprint", fmt::format("{:016x}", train_set.fingerprint())}});
  run_state.update(recipe);
  return run_state;
}

}  // namespace

nlohmann::json load_checkpoint(const fs::path& dir, Model& m, TrainingState& s) {
  nlohmann::json state = read_checkpoint_state(dir, RunKind::pretraining);
  load_checkpoint_weights(dir, m, s);
  return state;
}

int64_t train(const TrainOptions& given, const std::function<void(const TrainEvent&)>& on_event,
              const std::atomic<bool>* stop) {
  TrainOptions o = given;
  check_train_options(o);
  // Data parallel (mpirun -np W): every rank trains on its share of each batch; rank 0 alone
  // writes the output directory, checkpoints and metrics, evaluates and reports.
  auto& world = dist::World::get();
  const bool writer = world.rank() == 0;
  const int64_t W = world.size();
  check(W == 1 || o.nonfinite.action == OnNonfinite::stop,
        "--on-nonfinite {}: a data-parallel run ({} ranks) can only stop on a non-finite loss", to_string(o.nonfinite.action), W);
  RunSetup setup(RunKind::pretraining,
                 {o.out, o.max_steps, o.eval_steps, o.save_steps, o.save_total_limit, true, writer, o.nonfinite, o.accum_steps},
                 o.resume, o.overwrite);
  o.resume = setup.resume();
  data::PretrainingDataset train_set(o.data, "train",
                                     {o.dynamic_masking, o.seed, std::max(o.masked_lm_prob, o.masked_lm_prob_final)});
  const int64_t S = static_cast<int64_t>(train_set.seq_len());
  check_training_data(o, train_set);

  const BertConfig config = model_config(o, train_set);
  const nlohmann::json recipe = recipe_state(o, config);
  Model model = initial_model(o, config, recipe);
  check(static_cast<int64_t>(train_set.vocab_size()) <= config.vocab_size,
        "the data's vocabulary has {} tokens, the model only {} (vocab_size in config.json)",
        train_set.vocab_size(), config.vocab_size);
  check(S <= config.max_position_embeddings, "the data's sequence length {} exceeds max_position_embeddings {}",
        S, config.max_position_embeddings);

  const std::optional<data::PretrainingDataset> eval_set = open_eval_set(o, config, writer);

  TrainStepper stepper(model, train_run_spec(o, train_set, W), o.optimizer, o.seed);
  const nlohmann::json run_state = train_run_state(o, train_set, W, recipe);
  agree_across_ranks(world, run_state, o, config);
  if (setup.resuming()) check_resumable(setup.saved(), run_state, o);
  // The checkpoint's weights in the training form (--residual-scale: as trained).
  const RunSetup::Load load = [&](const fs::path& dir, const nlohmann::json&) {
    load_training_weights(dir, model, stepper.state(), o.residual_scale);
  };
  const LoopState start = setup.start(load);
  // Every rank starts from rank 0's parameters (they already agree: same seed or checkpoint).
  world.broadcast(model.params.arena(), model.params.arena_size());
  MetricsLog& metrics = setup.open_metrics(start.step);

  const std::optional<data::ContextYardsticks> yardsticks =
      writer && o.eval_diagnostics && eval_set->size() > 0 ? count_yardsticks(train_set, o.max_steps, on_event)
                                                           : std::nullopt;

  InstanceStream stream(train_set);
  const LrScheduleOptions schedule = lr_schedule(o);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<BertInputs> micro(o.accum_steps);
  int64_t steps_run = 0;  // in this process, for the rate
  LoopHooks hooks;
  hooks.step = [&](int64_t step, int64_t data_step, const MicroBatchPolicy& policy) {
    // Micro-batch k of the step is W x batch_size instances of the stream; rank r takes the
    // r-th share, so W ranks see the batches of one process with a W times larger batch.
    for (int64_t k = 0; k < o.accum_steps; ++k) {
      uint64_t first =
          static_cast<uint64_t>((((data_step - 1) * o.accum_steps + k) * W + world.rank()) * o.batch_size);
      micro[k] = to_inputs(stream.batch(first, static_cast<size_t>(o.batch_size), masked_lm_prob_at(o, step)));
      if (step <= o.seq_len_warmup_steps) micro[k] = truncate_sequences(micro[k], o.seq_len_warmup_len);
    }
    const float lr = learning_rate(schedule, step);
    stepper.set_update_scale(kPositionTable, step <= o.position_lr_steps ? static_cast<float>(o.position_lr_scale) : 1.f);
    StepStats s = stepper.step(micro, step, lr, policy);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double per_step = elapsed / double(++steps_run);
    TrainEvent ev;
    ev.step_index = step;
    ev.max_steps = o.max_steps;
    ev.stats = s;
    ev.lr = lr;
    ev.seq_per_s = double(o.batch_size * o.accum_steps * W) / per_step;
    ev.eta_s = per_step * double(o.max_steps - step);
    if (!writer) return s.dropped;
    nlohmann::json line = {{"step", step}, {"loss", s.loss()}, {"mlm_loss", s.mlm_loss},
                           {"mlm_accuracy", s.mlm_accuracy}, {"grad_norm", s.grad_norm},
                           {"lr", lr}, {"seq_per_s", ev.seq_per_s}};
    if (o.nsp) line["nsp_loss"] = s.nsp_loss;  // masked LM only: no NSP field
    metrics.write(line);
    on_event(ev);
    return s.dropped;
  };
  hooks.evaluate = [&](int64_t step) {
    if (!writer || eval_set->size() == 0) return;  // no collective inside: the other ranks go on
    TrainEvent ev;
    ev.kind = TrainEvent::eval;
    ev.step_index = step;
    ev.max_steps = o.max_steps;
    ev.stats = evaluate(stepper, *eval_set, o.batch_size, o.eval_batches, ev.baseline_accuracy,
                        yardsticks ? &*yardsticks : nullptr, ev.plateau);
    nlohmann::json line = eval_record(ev, o.nsp);
    line["sequences"] = step * o.batch_size * o.accum_steps * W;  // seen in training, all ranks
    metrics.write(line);
    on_event(ev);
  };
  hooks.save = [&](const fs::path& dir, const LoopState& at) {
    nlohmann::json st = RunSetup::checkpoint_state(run_state, at);
    st["instances_seen"] = at.step * o.accum_steps * o.batch_size * W;
    st["data"] = o.data.string();
    save_checkpoint(dir, PlainBert(model, o.residual_scale).get(), stepper.state(), st, o.data,
                    [&](const fs::path& tmp) { save_training_form(tmp, model, o.residual_scale); });
  };
  hooks.restore = [&](const fs::path& dir) { return setup.restore(dir, load); };
  // A signal may reach the ranks in different steps: stop together when any rank has it.
  hooks.stop_requested = [&] {
    double votes = stop && stop->load() ? 1 : 0;
    world.allreduce_sum(&votes, 1);
    return votes > 0;
  };
  hooks.on_event = [&](const LoopEvent& e) {
    if (!writer) return;
    on_event(to_train_event(e, o.out));
  };
  const LoopState end = setup.run(start, hooks);
  if (!writer || end.step < o.max_steps) return end.step;
  // The final model at the top of the output directory, as Hugging Face's Trainer leaves it.
  save_model_dir(o.out, model.config, PlainBert(model, o.residual_scale).get().params);
  copy_tokenizer(o.data, o.out);
  return end.step;
}

}  // namespace bertlab
