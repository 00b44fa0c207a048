#include "runtime/finetune.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <tuple>

#include "base/error.h"
#include "base/file_util.h"
#include "base/json_file.h"
#include "runtime/checkpoint.h"
#include "runtime/lr_schedule.h"
#include "runtime/run_setup.h"
#include "runtime/skip_micro_batches.h"

namespace bertlab {

namespace fs = std::filesystem;
using data::EncodedExample;
using data::LabelSet;

namespace {

// Hugging Face's _init_weights for a Linear: weight ~ normal(0, initializer_range), bias 0.
void init_classifier(ParamStore& p, const BertConfig& c, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x636c617373696669ull);
  std::normal_distribution<float> normal(0.f, static_cast<float>(c.initializer_range));
  const auto& w = p.info("classifier.weight");
  float* d = p.data("classifier.weight");
  for (int64_t i = 0; i < w.numel(); ++i) d[i] = normal(rng);
  std::fill_n(p.data("classifier.bias"), p.info("classifier.bias").numel(), 0.f);
}

nlohmann::json finetuned_config(const BertConfig& c, Heads h, const LabelSet& labels) {
  auto j = config_to_json(c);
  j["architectures"] = {architecture(h)};
  nlohmann::json i2l = nlohmann::json::object(), l2i = nlohmann::json::object();
  for (int32_t i = 0; i < labels.size(); ++i) i2l[std::to_string(i)] = labels.name(i), l2i[labels.name(i)] = i;
  j["id2label"] = i2l;
  j["label2id"] = l2i;
  j["num_labels"] = labels.size();
  if (h == Heads::sequence_classification) j["problem_type"] = "single_label_classification";
  return j;
}


void write_model(const fs::path& dir, const BertConfig& c, Heads heads, const LabelSet& labels,
                 const ParamStore& params, const fs::path& tokenizer_dir) {
  save_model_dir(dir, c, params);
  write_file_atomic(dir / "config.json", finetuned_config(c, heads, labels).dump(2) + "\n");
  copy_tokenizer(tokenizer_dir, dir);
}

// The keys carry the split's prefix, as Hugging Face's metric_key_prefix ("eval_", "test_").
nlohmann::json eval_json(const EvalResult& r, const std::string& prefix = "eval_") {
  nlohmann::json per = nlohmann::json::array();
  for (const auto& c : r.per_class)
    per.push_back({{"label", c.label}, {"precision", c.precision}, {"recall", c.recall}, {"f1", c.f1},
                   {"support", c.support}, {"predicted", c.predicted}});
  return {{prefix + "loss", r.loss}, {prefix + "accuracy", r.accuracy}, {prefix + "macro_f1", r.macro_f1},
          {prefix + "count", r.count}, {prefix + "majority_class_accuracy", r.majority_accuracy}, {"per_class", per}};
}

}  // namespace

// Loads the encoder (and the pooler and classifier when wanted and present) from a checkpoint
// into `p`; the other parameters keep their initial values. Returns the names left as they were.
std::vector<std::string> load_encoder_weights(ParamStore& p, const SafetensorsFile& f, bool classifier) {
  Graph wanted;
  std::vector<std::string> kept;
  const bool has_pooler = f.contains("bert.pooler.dense.weight") || f.contains("pooler.dense.weight");
  for (const auto& info : p.params()) {
    const bool is_pooler = info.name.rfind("bert.pooler.", 0) == 0;
    const bool is_classifier = info.name.rfind("classifier.", 0) == 0;
    if ((is_pooler && !has_pooler) || (is_classifier && !classifier)) {
      kept.push_back(info.name);
      continue;
    }
    wanted.add_tensor(info.name, info.shape, DType::f32, Role::weight);
  }
  ParamStore sub = ParamStore::for_graph(wanted);
  load_hf_weights(sub, f);
  for (const auto& info : sub.params()) std::copy_n(sub.data(info.name), info.numel(), p.data(info.name));
  return kept;
}

namespace {

// The examples of both files, their labels (from the training file) and padded lengths.
struct FinetuneData {
  LabelSet labels;
  EncodedSet train, eval, test;
  int64_t S = 0, S_eval = 0, S_test = 0;  // padded to the longest example of the set (rounded up to 8), at most the limit
};

FinetuneData read_finetune_data(const FinetuneOptions& o, const BertConfig& config, const data::BertTokenizer& tok,
                                const std::function<void(std::string)>& say) {
  // Sequences cut to the model's positions.
  auto cap = [&](int64_t n) { return static_cast<size_t>(std::min(n, config.max_position_embeddings)); };
  const size_t max_len = cap(o.max_seq_length);
  const size_t eval_max_len = cap(o.eval_max_seq_length > 0 ? o.eval_max_seq_length : o.max_seq_length);
  FinetuneData d;
  d.train = encode_file(o.train, o.task, tok, &d.labels, true, max_len);
  d.eval = encode_file(o.eval, o.task, tok, &d.labels, true, eval_max_len);
  if (!o.test.empty()) d.test = encode_file(o.test, o.task, tok, &d.labels, true, eval_max_len);
  check(d.labels.size() >= 2, "{}: only {} distinct label(s); classification needs at least 2", o.train.string(),
        d.labels.size());
  for (auto [name, set, len] : {std::tuple{"training", &d.train, max_len}, std::tuple{"evaluation", &d.eval, eval_max_len},
                                std::tuple{"test", &d.test, eval_max_len}})
    if (set->truncated > 0)
      say(fmt::format("truncated {} of {} {} examples to {} tokens (--{}max-seq-length, max_position_embeddings {})",
                      set->truncated, set->items.size(), name, len, set == &d.train ? "" : "eval-",
                      config.max_position_embeddings));
  auto padded = [](const EncodedSet& set, size_t limit) {
    return std::min<int64_t>(static_cast<int64_t>(limit), (static_cast<int64_t>(set.longest) + 7) / 8 * 8);
  };
  d.S = padded(d.train, max_len), d.S_eval = padded(d.eval, eval_max_len), d.S_test = padded(d.test, eval_max_len);
  say(fmt::format("{} labels; {} training and {} evaluation examples; sequence length {} (evaluation {}){}",
                  d.labels.size(), d.train.items.size(), d.eval.items.size(), d.S, d.S_eval,
                  o.group_by_length ? fmt::format(", grouped by length: padded to multiples of {}", length_quantum(d.S))
                                    : ""));
  return d;
}

// The settings a resume must share with the checkpoint to continue it exactly (trainer_state.json).
nlohmann::json finetune_run_state(const FinetuneOptions& o, const LabelSet& labels, int64_t max_steps,
                                  int64_t warmup_steps) {
  const auto& opt = o.optimizer;
  nlohmann::json state = trainer_state_header(RunKind::finetune);
  state.update({{"task", task_flag(heads_for(o.task))},
                {"labels", labels.names()},
                {"train_sha256", sha256_file(o.train)},
                {"eval_sha256", sha256_file(o.eval)},
                {"vocab_sha256", sha256_file(o.model / "vocab.txt")},
                {"seed", o.seed},
                {"batch_size", o.batch_size},
                {"accum_steps", o.accum_steps},
                {"max_steps", max_steps},
                {"max_seq_length", o.max_seq_length},
                {"eval_max_seq_length", o.eval_max_seq_length},
                {"group_by_length", o.group_by_length},
                {"learning_rate", o.lr},
                {"warmup_steps", warmup_steps},
                {"optimizer", {to_string(opt.kind), opt.beta1, opt.beta2, opt.eps, opt.weight_decay, opt.max_grad_norm}},
                {"precision", to_string(o.precision)},
                {"metric", to_string(o.metric)},
                {"from_scratch", o.from_scratch},
                {"train", o.train.string()}});
  return state;
}

// The keys of finetune_run_state that a resume must match; "train" (where the file was) may differ.
constexpr std::initializer_list<const char*> kResumeKeys{
    "task",           "labels",     "train_sha256",        "eval_sha256",     "vocab_sha256", "seed",
    "batch_size",     "accum_steps", "max_steps",          "max_seq_length",  "eval_max_seq_length",
    "group_by_length", "learning_rate", "warmup_steps",    "optimizer",       "precision",    "metric",
    "from_scratch"};

EvalResult eval_from_json(const nlohmann::json& j) {
  EvalResult r;
  r.loss = j.at("eval_loss").get<double>(), r.accuracy = j.at("eval_accuracy").get<double>();
  r.macro_f1 = j.at("eval_macro_f1").get<double>(), r.count = j.at("eval_count").get<int64_t>();
  r.majority_accuracy = j.at("eval_majority_class_accuracy").get<double>();
  for (const auto& c : j.at("per_class"))
    r.per_class.push_back({c.at("label").get<std::string>(), c.at("precision").get<double>(),
                           c.at("recall").get<double>(), c.at("f1").get<double>(), c.at("support").get<int64_t>(),
                           c.at("predicted").get<int64_t>()});
  return r;
}

// What a fine-tuning run carries from step to step beyond the weights and moments: the best
// model and its evaluation, and the counters behind the padding statistics. Saved in each
// checkpoint, so that a resume ends as the uninterrupted run would.
struct FinetuneProgress {
  ParamStore best;  // the best model's parameters (when best_step > 0)
  double best_metric = -1;
  int64_t best_step = 0;
  EvalResult best_eval;
  int64_t sequences = 0, padded_tokens = 0;
  double train_seconds = 0;  // wall clock: reported only, never compared

  nlohmann::json to_json() const {
    return {{"best_metric", best_metric}, {"best_step", best_step}, {"best_eval", eval_json(best_eval)},
            {"sequences", sequences},     {"padded_tokens", padded_tokens}, {"train_seconds", train_seconds}};
  }
  void from_json(const nlohmann::json& st, const fs::path& file) {
    check(st.contains("finetune") && st["finetune"].is_object(), "{}: field 'finetune' is missing", file.string());
    try {
      const auto& j = st["finetune"];
      best_metric = j.at("best_metric").get<double>(), best_step = j.at("best_step").get<int64_t>();
      best_eval = eval_from_json(j.at("best_eval"));
      sequences = j.at("sequences").get<int64_t>(), padded_tokens = j.at("padded_tokens").get<int64_t>();
      train_seconds = j.at("train_seconds").get<double>();
    } catch (const nlohmann::json::exception& e) {
      fail("{}: field 'finetune' is malformed: {}", file.string(), e.what());
    }
  }
};

constexpr const char* kBestModelFile = "best_model.safetensors";

// One fine-tuning run: the model, its executors, the data order and the progress a checkpoint
// keeps. Its methods are the run loop's hooks; it stays where it was built (the executors'
// factories refer to it).
class FinetuneRun {
 public:
  using Say = std::function<void(std::string)>;
  // `run_state`: finetune_run_state of these options and data; `setup` runs the loop and keeps the log.
  FinetuneRun(const FinetuneOptions& o, const BertConfig& config, const data::BertTokenizer& tok, FinetuneData fd,
              nlohmann::json run_state, RunSetup& setup, const std::function<void(const FinetuneEvent&)>& on_event)
      : o_(o), config_(config), heads_(heads_for(o.task)), tok_(tok), fd_(std::move(fd)), L_(fd_.labels.size()),
        N_(static_cast<int64_t>(fd_.train.items.size())), batches_per_epoch_((N_ + o.batch_size - 1) / o.batch_size),
        run_state_(std::move(run_state)), setup_(setup),
        model_(init_model(config, heads_, o.seed, L_)), state_(model_.params), on_event_(on_event),
        train_ex_(fd_.S, o.group_by_length, [this](int64_t s) { return make_executor(s, true); }),
        eval_ex_(fd_.S_eval, o.group_by_length, [this](int64_t s) { return make_executor(s, false); }),
        test_ex_(fd_.S_test, o.group_by_length, [this](int64_t s) { return make_executor(s, false); }) {
    sched_.lr = o.lr, sched_.schedule = LrSchedule::linear;
    sched_.max_steps = run_state_.at("max_steps").get<int64_t>();
    sched_.warmup_steps = run_state_.at("warmup_steps").get<int64_t>();
    init_classifier(model_.params, config, o.seed);
    progress_.best = ParamStore::like(model_.params);
    const auto counts = majority_counts(fd_.train, L_);
    const auto majority = std::max_element(counts.begin(), counts.end()) - counts.begin();
    majority_label_ = majority;
    majority_accuracy_ = share_of(fd_.eval, majority);
  }

  int64_t max_steps() const { return sched_.max_steps; }

  // The encoder from the model directory, and its classifier when it holds one for these labels.
  void load_pretrained(Heads source_heads, const Say& say) {
    check(fs::exists(o_.model / "model.safetensors"), "model directory {} has no model.safetensors", o_.model.string());
    bool same_labels = false;
    if (source_heads == heads_)
      same_labels = id2label(read_json_file(o_.model / "config.json", "model config"), o_.model / "config.json") ==
                    fd_.labels.names();
    auto fresh = load_encoder_weights(model_.params, SafetensorsFile(o_.model / "model.safetensors"), same_labels);
    if (!fresh.empty()) say(fmt::format("newly initialised: {}", fmt::join(fresh, ", ")));
  }

  // A checkpoint of this run (`st`: its trainer state): weights, moments, the best model and the counters.
  void load(const fs::path& dir, const nlohmann::json& st) {
    load_checkpoint_weights(dir, model_, state_);
    progress_.from_json(st, dir / "trainer_state.json");
    if (progress_.best_step == st.at("step").get<int64_t>())
      std::copy_n(model_.params.arena(), model_.params.arena_size(), progress_.best.arena());
    else if (progress_.best_step > 0)
      load_hf_weights(progress_.best, SafetensorsFile(dir / kBestModelFile));
  }

  void save(const fs::path& dir, const LoopState& at) const {
    nlohmann::json st = RunSetup::checkpoint_state(run_state_, at);
    st["finetune"] = progress_.to_json();
    // The checkpoint is a fine-tuned model directory as well (config.json with the labels).
    save_checkpoint(dir, model_, state_, st, o_.model, [&](const fs::path& tmp) {
      write_file_atomic(tmp / "config.json", finetuned_config(config_, heads_, fd_.labels).dump(2) + "\n");
      if (progress_.best_step > 0 && progress_.best_step != at.step) save_hf_weights(tmp / kBestModelFile, progress_.best);
    });
  }

  void evaluate(int64_t step) {
    eval_ex_.repack_weights();
    FinetuneEvent e;
    e.kind = FinetuneEvent::evaluation;
    e.step_index = step, e.max_steps = max_steps();
    e.eval = evaluate_set(eval_ex_, fd_.eval, o_.batch_size, heads_, L_, tok_, fd_.labels);
    e.eval.majority_accuracy = majority_accuracy_;
    e.best = e.eval.metric(o_.metric) > progress_.best_metric;
    if (e.best) {
      progress_.best_metric = e.eval.metric(o_.metric);
      std::copy_n(model_.params.arena(), model_.params.arena_size(), progress_.best.arena());
      progress_.best_eval = e.eval, progress_.best_step = step;
    }
    auto j = eval_json(e.eval);
    j.erase("per_class");
    j["step"] = step;
    setup_.metrics().write(j);
    on_event_(e);
  }

  // Optimizer step `step` on the micro-batches of step `data_step`. Returns the micro-batches
  // left out of the update (--on-nonfinite skip; runtime/skip_micro_batches.h).
  std::vector<DroppedMicroBatch> step(int64_t step, int64_t data_step, const MicroBatchPolicy& policy) {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t K = o_.accum_steps;
    std::vector<std::vector<const EncodedExample*>> micro(K);
    for (int64_t k = 0; k < K; ++k) micro[k] = micro_rows((data_step - 1) * K + k);
    // The weights stay fixed until the update: pack (and cast) them once for the K micro-batches.
    const uint64_t weights_version = K > 1 ? next_weights_version() : 0;
    std::vector<int64_t> all(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) all[k] = k;
    Pass pass;
    const std::vector<std::string> loss_reasons = accumulate(micro, all, step, weights_version, policy, pass);
    // The step's data, read and padded, whether or not a micro-batch is left out.
    const int64_t sequences = pass.sequences, padded_tokens = pass.padded_tokens;
    AccumulationParts parts;
    parts.accumulate = [&](const std::vector<int64_t>& use) {
      return accumulate(micro, use, step, weights_version, policy, pass);
    };
    // The optimizer of any of the executors updates the shared arenas; it leaves the parameters
    // alone on non-finite gradients.
    parts.update = [&] {
      pass.last->run(nullptr, kCommunication | kOptimizer);
      return std::isfinite(pass.last->context().grad_norm);
    };
    parts.first_non_finite_gradient = [&] { return first_non_finite(state_.grads); };
    const bool may_drop = policy.may_drop > 0 && K > 1;
    const std::vector<DroppedMicroBatch> dropped = update_unless_non_finite(
        step, K, std::isfinite(pass.loss()), loss_reasons, may_drop ? policy.may_drop : 0, parts,
        [&] { return fmt::format("step {}: the loss is not finite", step); },
        [&] { return fmt::format("step {}: gradients are not finite", step); });
    const double loss = pass.loss(), correct = pass.correct, count = pass.count;
    auto& ctx = pass.last->context();
    progress_.sequences += sequences, progress_.padded_tokens += padded_tokens;
    progress_.train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    FinetuneEvent e;
    e.kind = FinetuneEvent::step;
    e.step_index = step, e.max_steps = max_steps(), e.loss = loss, e.lr = ctx.lr;
    e.accuracy = count > 0 ? correct / count : 0;
    e.seq_per_s = double(progress_.sequences) / progress_.train_seconds;
    e.eta_s = progress_.train_seconds / double(step) * double(max_steps() - step);
    setup_.metrics().write({{"step", step}, {"loss", loss}, {"accuracy", e.accuracy}, {"lr", e.lr},
                            {"grad_norm", ctx.grad_norm}, {"seq_per_s", e.seq_per_s}});
    on_event_(e);
    return dropped;
  }

  // The result of a run that ended at `end`; when it completed, the best model at the top of the
  // output directory (load_best_model_at_end + save_model) and the results beside it.
  FinetuneResult finish(const LoopState& end) {
    FinetuneResult r;
    r.steps = end.step;
    r.best = progress_.best_eval, r.best_step = progress_.best_step;
    r.train_seq_per_s = progress_.train_seconds > 0 ? double(progress_.sequences) / progress_.train_seconds : 0;
    r.seq_len = fd_.S;
    r.mean_padded_length = progress_.sequences > 0 ? double(progress_.padded_tokens) /
                                                         double(o_.batch_size * end.step * o_.accum_steps)
                                                   : 0;
    r.graphs = train_ex_.count();
    r.interrupted = end.step < max_steps();
    if (r.interrupted) return r;
    write_model(o_.out, config_, heads_, fd_.labels, progress_.best, o_.model);
    auto results = eval_json(r.best);
    results["best_step"] = r.best_step;
    results["metric"] = to_string(o_.metric);
    results["seq_len"] = fd_.S;
    results["mean_padded_seq_len"] = r.mean_padded_length;
    write_file_atomic(o_.out / "eval_results.json", results.dump(2) + "\n");
    // Wall-clock figures apart, so that eval_results.json of a resumed run equals an uninterrupted one's.
    const nlohmann::json throughput{
        {"train_seq_per_s", r.train_seq_per_s}, {"train_seconds", progress_.train_seconds}, {"steps", end.step}};
    write_file_atomic(o_.out / "train_results.json", throughput.dump(2) + "\n");
    if (!o_.test.empty()) {
      r.test = test_kept_model();
      auto test = eval_json(*r.test, "test_");
      test["best_step"] = r.best_step;
      test["file"] = o_.test.string();
      write_file_atomic(o_.out / "test_results.json", test.dump(2) + "\n");
    }
    return r;
  }

 private:
  // The sums of one accumulation pass over some of a step's micro-batches.
  struct Pass {
    double loss_sum = 0, correct = 0, count = 0;
    int64_t sequences = 0, padded_tokens = 0;
    Executor* last = nullptr;  // the executor of the last micro-batch run
    double loss() const { return count > 0 ? loss_sum / count : 0; }
  };

  // Zeroed gradients, then forward + backward of the micro-batches `use` of `micro`, the
  // classifier loss divided by their labelled count. Returns, per micro-batch of `use`, why its
  // loss is not finite ("" when it is).
  std::vector<std::string> accumulate(const std::vector<std::vector<const EncodedExample*>>& micro,
                                      const std::vector<int64_t>& use, int64_t step, uint64_t weights_version,
                                      const MicroBatchPolicy& policy, Pass& pass) {
    const int64_t B = o_.batch_size;
    int64_t labelled = 0;
    for (int64_t k : use)
      for (auto* e : micro[k])
        for (int32_t l : e->labels) labelled += l != -100;
    state_.grads.zero();
    pass = Pass{};
    std::vector<std::string> loss_reasons;
    for (int64_t k : use) {
      auto [ex, s] = train_ex_.at(micro[k]);
      auto& ctx = ex->context();
      // A micro-batch keeps its dropout stream when others of the step are left out.
      ctx.step = step, ctx.micro = k, ctx.weights_version = weights_version;
      ctx.lr = learning_rate(sched_, step);
      // The classifier loss; the test hook's NaN makes every gradient of the micro-batch NaN.
      const NonfiniteInjection* injected = policy.injected(k);
      ctx.nsp_denominator = injected ? std::numeric_limits<float>::quiet_NaN()
                                     : static_cast<float>(std::max<int64_t>(1, labelled));
      fill_batch(*ex, micro[k], B, s, heads_, tok_.pad_id(), tok_.cls_id());
      ex->run(nullptr, kForward | kBackward);
      const float* out = ex->output("loss");
      const double loss_sum = injected && injected->kind == NonfiniteKind::loss
                                  ? std::numeric_limits<double>::quiet_NaN() : double(out[0]);
      loss_reasons.push_back(std::isfinite(loss_sum) ? ""
                                                     : fmt::format("the loss is not finite ({} over {} labelled)",
                                                                   loss_sum, out[2]));
      pass.loss_sum += loss_sum, pass.correct += out[1], pass.count += out[2];
      pass.sequences += static_cast<int64_t>(micro[k].size());
      pass.padded_tokens += B * s;
      pass.last = ex;
    }
    return loss_reasons;
  }

  // The share of a set's labelled items that carry `label` (the majority baseline).
  double share_of(const EncodedSet& set, int64_t label) const {
    const auto counts = majority_counts(set, L_);
    int64_t total = 0;
    for (auto c : counts) total += c;
    return total ? double(counts[label]) / double(total) : 0;
  }

  // The kept model on the test set, once the run is over (its weights replace the last ones).
  EvalResult test_kept_model() {
    std::copy_n(progress_.best.arena(), progress_.best.arena_size(), model_.params.arena());
    test_ex_.repack_weights();
    EvalResult r = evaluate_set(test_ex_, fd_.test, o_.batch_size, heads_, L_, tok_, fd_.labels);
    r.majority_accuracy = share_of(fd_.test, majority_label_);
    return r;
  }

  std::unique_ptr<Executor> make_executor(int64_t S, bool train) {
    Graph g = classification_graph(config_, heads_, L_, o_.batch_size, S, train, o_.precision, o_.optimizer.kind);
    if (!train) return std::make_unique<Executor>(std::move(g), static_cast<const ParamStore&>(model_.params));
    auto ex = std::make_unique<Executor>(std::move(g), model_.params, &state_);
    auto& ctx = ex->context();
    ctx.seed = o_.seed;
    ctx.beta1 = o_.optimizer.beta1, ctx.beta2 = o_.optimizer.beta2, ctx.eps = o_.optimizer.eps;
    ctx.weight_decay = o_.optimizer.weight_decay, ctx.max_grad_norm = o_.optimizer.max_grad_norm;
    return ex;
  }

  // Micro-batch m of the run: every epoch a permutation from (seed, epoch); the last batch may be short.
  std::vector<const EncodedExample*> micro_rows(int64_t m) {
    const int64_t B = o_.batch_size, N = N_;
    const int64_t epoch = m / batches_per_epoch_, first = (m % batches_per_epoch_) * B;
    const auto& items = fd_.train.items;
    if (epoch != order_epoch_) {
      order_.resize(N);
      for (int64_t i = 0; i < N; ++i) order_[i] = i;
      std::mt19937_64 rng(o_.seed * 1000003ull + static_cast<uint64_t>(epoch));
      std::shuffle(order_.begin(), order_.end(), rng);
      // Grouping by length (Hugging Face's LengthGroupedSampler): mega-batches of 50 batches of
      // the shuffled order, each sorted by length, longest first.
      if (o_.group_by_length)
        for (int64_t m0 = 0; m0 < N; m0 += 50 * B)
          std::stable_sort(order_.begin() + m0, order_.begin() + std::min(N, m0 + 50 * B),
                           [&](int64_t a, int64_t b) { return items[a].ids.size() > items[b].ids.size(); });
      order_epoch_ = epoch;
    }
    std::vector<const EncodedExample*> rows;
    for (int64_t i = first; i < std::min(N, first + B); ++i) rows.push_back(&items[order_[i]]);
    return rows;
  }

  const FinetuneOptions& o_;
  const BertConfig& config_;
  const Heads heads_;
  const data::BertTokenizer& tok_;
  const FinetuneData fd_;
  const int64_t L_, N_, batches_per_epoch_;
  LrScheduleOptions sched_;  // linear warmup and decay
  const nlohmann::json run_state_;
  RunSetup& setup_;
  Model model_;
  TrainingState state_;
  const std::function<void(const FinetuneEvent&)>& on_event_;
  LengthExecutors train_ex_, eval_ex_, test_ex_;
  int64_t majority_label_ = 0;
  double majority_accuracy_ = 0;
  FinetuneProgress progress_;
  std::vector<int64_t> order_;
  int64_t order_epoch_ = -1;
};

}  // namespace

FinetuneResult finetune(const FinetuneOptions& given, const std::function<void(const FinetuneEvent&)>& on_event,
                        const std::atomic<bool>* stop) {
  FinetuneOptions o = given;
  auto say = [&](std::string text) {
    FinetuneEvent e;
    e.kind = FinetuneEvent::message;
    e.text = std::move(text);
    on_event(e);
  };
  check(o.batch_size > 0 && o.accum_steps > 0, "--batch-size and --accum-steps must be positive");
  check(o.max_steps > 0 || o.epochs > 0, "give --num-train-epochs > 0 or --max-steps > 0");
  check(!o.out.empty() && !o.train.empty() && !o.eval.empty(), "finetune needs --model, --train, --eval and --out");
  check(o.save_steps >= 0 && o.save_total_limit >= 0, "--save-steps and --save-total-limit must not be negative");
  check_tokenizer(o.model);
  // The steps and evaluations are known once the data is read.
  RunSetup setup(RunKind::finetune,
                 {o.out, 0, 0, o.save_steps, o.save_total_limit, o.save_steps > 0, true, o.nonfinite, o.accum_steps},
                 o.resume, o.overwrite);
  o.resume = setup.resume();
  // Before the data is read in this task's format.
  if (setup.resuming()) setup.check_resume({{"task", task_flag(heads_for(o.task))}}, {"task"});
  const Heads heads = heads_for(o.task);
  const Heads source_heads = finetuned_heads(o.model);
  check(source_heads == Heads::none || source_heads == heads,
        "--task {}: model directory {} holds a model fine-tuned for {} ({} in config.json); fine-tune "
        "from the pretrained model, or use --task {}", task_flag(heads), o.model.string(),
        to_string(source_heads), architecture(source_heads), task_flag(source_heads));
  const BertConfig config = load_config(o.model / "config.json");
  const auto tok = data::BertTokenizer::load(o.model);
  check(tok.vocab().size() <= static_cast<size_t>(config.vocab_size),
        "{}: the tokenizer has {} tokens, the model only {} (vocab_size)", o.model.string(), tok.vocab().size(),
        config.vocab_size);
  FinetuneData fd = read_finetune_data(o, config, tok, say);

  const int64_t B = o.batch_size, K = o.accum_steps, N = static_cast<int64_t>(fd.train.items.size());
  const int64_t steps_per_epoch = std::max<int64_t>(1, ((N + B - 1) / B + K - 1) / K);
  const int64_t max_steps = o.max_steps > 0 ? o.max_steps : static_cast<int64_t>(std::ceil(o.epochs * steps_per_epoch));
  const int64_t warmup = o.warmup_steps > 0 ? o.warmup_steps : static_cast<int64_t>(std::ceil(o.warmup_ratio * max_steps));
  setup.loop.max_steps = max_steps;
  setup.loop.eval_steps = o.eval_steps > 0 ? o.eval_steps : steps_per_epoch;
  nlohmann::json run_state = finetune_run_state(o, fd.labels, max_steps, warmup);
  if (setup.resuming()) setup.check_resume(run_state, kResumeKeys);

  // The model: the encoder from the directory, a new classifier (unless the directory holds
  // one for the same labels); or everything from the checkpoint.
  FinetuneRun run(o, config, tok, std::move(fd), std::move(run_state), setup, on_event);
  const RunSetup::Load load = [&](const fs::path& dir, const nlohmann::json& st) { run.load(dir, st); };
  if (setup.resuming())
    say(fmt::format("resuming from {} (step {})", o.resume.string(), setup.saved().at("step").get<int64_t>()));
  else if (!o.from_scratch)
    run.load_pretrained(source_heads, say);
  else
    say("from scratch: every weight randomly initialised");
  const LoopState start = setup.start(load);
  setup.open_metrics(start.step);

  LoopHooks hooks;
  hooks.step = [&](int64_t step, int64_t data_step, const MicroBatchPolicy& policy) {
    return run.step(step, data_step, policy);
  };
  hooks.evaluate = [&](int64_t step) { run.evaluate(step); };
  hooks.save = [&](const fs::path& dir, const LoopState& at) { run.save(dir, at); };
  hooks.restore = [&](const fs::path& dir) { return setup.restore(dir, load); };
  hooks.stop_requested = [&] { return stop && stop->load(); };
  hooks.on_event = [&](const LoopEvent& e) { say(loop_event_text(e, o.out)); };
  return run.finish(setup.run(start, hooks));
}

}  // namespace bertlab
