#include "runtime/classify.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "base/file_util.h"
#include "base/json_file.h"
#include "runtime/checkpoint.h"
#include "runtime/fusion.h"
#include "runtime/model.h"

namespace bertlab {

namespace fs = std::filesystem;
using data::EncodedExample;
using data::LabelSet;
using data::TaskKind;

namespace {

const char* const kSeqArch = hf_architecture(Heads::sequence_classification);
const char* const kTokenArch = hf_architecture(Heads::token_classification);

// Softmax of one row of logits, in double.
std::vector<double> softmax(const float* x, int64_t L) {
  std::vector<double> p(static_cast<size_t>(L));
  const double mx = *std::max_element(x, x + L);
  double sum = 0;
  for (int64_t i = 0; i < L; ++i) sum += p[i] = std::exp(double(x[i]) - mx);
  for (auto& v : p) v /= sum;
  return p;
}

// The padded length of a batch whose longest example has `longest` tokens: `S` itself, or with
// grouping the next multiple of the quantum.
int64_t padded_length(int64_t longest, int64_t S, bool group) {
  if (!group) return S;
  const int64_t quantum = length_quantum(S);
  return std::min(S, std::max<int64_t>(1, (longest + quantum - 1) / quantum) * quantum);
}

int64_t longest_of(const std::vector<const EncodedExample*>& rows) {
  size_t n = 1;
  for (const auto* e : rows) n = std::max(n, e->ids.size());
  return static_cast<int64_t>(n);
}

// Runs the inference graph over a set, in batches of B (by length when grouping); calls
// fn(example index, token index or -1, probabilities) for every labelled item (or every first
// sub-word / sequence when predicting).
template <typename Fn>
void run_inference(LengthExecutors& executors, const EncodedSet& set, int64_t B, Heads heads, int64_t L,
                   const data::BertTokenizer& tok, Fn&& fn) {
  const int64_t N = static_cast<int64_t>(set.items.size());
  std::vector<int64_t> order(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) order[i] = i;
  if (executors.grouped())
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return set.items[a].ids.size() > set.items[b].ids.size(); });
  for (int64_t first = 0; first < N; first += B) {
    std::vector<const EncodedExample*> rows;
    for (int64_t i = first; i < std::min(N, first + B); ++i) rows.push_back(&set.items[order[i]]);
    auto [exp, S] = executors.at(rows);
    Executor& ex = *exp;
    fill_batch(ex, rows, B, S, heads, tok.pad_id(), tok.cls_id());
    ex.run(nullptr, kForward);
    const float* logits = ex.output("logits");
    for (int64_t b = 0; b < static_cast<int64_t>(rows.size()); ++b) {
      const int64_t index = order[first + b];
      if (heads == Heads::sequence_classification) {
        fn(index, -1, softmax(logits + b * L, L));
        continue;
      }
      const auto& e = *rows[b];
      for (size_t s = 0; s < e.ids.size(); ++s)
        if (e.labels[s] != -100 || (e.word_of_token[s] >= 0 && (s == 0 || e.word_of_token[s - 1] != e.word_of_token[s])))
          fn(index, static_cast<int64_t>(s), softmax(logits + (b * S + int64_t(s)) * L, L));
    }
  }
}

}  // namespace

Heads heads_for(TaskKind t) {
  switch (t) {
    case TaskKind::sequence_classification: return Heads::sequence_classification;
    case TaskKind::token_classification: return Heads::token_classification;
  }
  return Heads::none;
}

const char* architecture(Heads h) { return hf_architecture(h); }

const char* task_flag(Heads h) {
  return to_string(h == Heads::token_classification ? TaskKind::token_classification : TaskKind::sequence_classification);
}

std::vector<std::string> id2label(const nlohmann::json& cfg, const fs::path& file) {
  check(cfg.contains("id2label") && cfg["id2label"].is_object(), "{}: no id2label; not a fine-tuned model",
        file.string());
  std::vector<std::string> names(cfg["id2label"].size());
  for (auto it = cfg["id2label"].begin(); it != cfg["id2label"].end(); ++it) {
    size_t id = 0;
    try {
      id = std::stoul(it.key());
    } catch (const std::exception&) {
      fail("{}: id2label key '{}' is not an integer", file.string(), it.key());
    }
    check(id < names.size() && it.value().is_string(), "{}: id2label entry '{}' is invalid", file.string(), it.key());
    names[id] = it.value().get<std::string>();
  }
  return names;
}

void check_tokenizer(const fs::path& dir) {
  check(fs::is_directory(dir), "model directory {} does not exist", dir.string());
  check(fs::exists(dir / "vocab.txt"), "model directory {} has no tokenizer: vocab.txt is missing", dir.string());
}


EncodedSet encode_file(const fs::path& file, TaskKind task, const data::BertTokenizer& tok,
                       LabelSet* labels, bool labelled, size_t max_length) {
  EncodedSet out;
  auto add = [&](EncodedExample e) {
    out.truncated += e.truncated;
    out.longest = std::max(out.longest, e.ids.size());
    out.items.push_back(std::move(e));
  };
  switch (task) {
    case TaskKind::sequence_classification: {
      auto ex = data::read_text_examples(file, labelled);
      if (labels && labels->size() == 0) *labels = LabelSet::from_examples(ex);
      for (const auto& e : ex)
        add(data::encode_text(tok, e, labelled ? labels->id(e.label, e.source + ": field 'label'") : -100, max_length));
      break;
    }
    case TaskKind::token_classification: {
      auto sents = data::read_conll(file, labelled);
      if (labels && labels->size() == 0) *labels = LabelSet::from_sentences(sents);
      for (const auto& s : sents) {
        std::vector<int32_t> tags;
        for (size_t w = 0; w < s.tags.size() && labelled; ++w)
          tags.push_back(labels->id(s.tags[w], fmt::format("{} (sentence starting there), word {}: field 'tag'", s.source, w + 1)));
        add(data::encode_words(tok, s.words, tags, max_length));
      }
      break;
    }
  }
  return out;
}

int64_t fill_batch(Executor& ex, const std::vector<const EncodedExample*>& rows, int64_t B, int64_t S,
                   Heads heads, int32_t pad_id, int32_t cls_id) {
  int32_t* ids = ex.input("input_ids");
  int32_t* types = ex.input("token_type_ids");
  int32_t* mask = ex.input("attention_mask");
  std::fill_n(ids, B * S, pad_id);
  std::fill_n(types, B * S, 0);
  std::fill_n(mask, B * S, 0);
  const bool tokens = heads == Heads::token_classification;
  if (tokens && ex.graph().find_tensor("token_positions")) {
    int32_t* pos = ex.input("token_positions");
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) pos[b * S + s] = static_cast<int32_t>(s);
  }
  int32_t* labels = ex.graph().find_tensor("labels") ? ex.input("labels") : nullptr;
  if (labels) std::fill_n(labels, tokens ? B * S : B, -100);
  int64_t counted = 0;
  for (int64_t b = 0; b < B; ++b) {
    const EncodedExample* e = b < static_cast<int64_t>(rows.size()) ? rows[b] : nullptr;
    if (!e) {  // a padding row: [CLS] alone, so attention has one position to attend to
      ids[b * S] = cls_id, mask[b * S] = 1;
      continue;
    }
    const int64_t n = static_cast<int64_t>(e->ids.size());
    std::copy_n(e->ids.begin(), n, ids + b * S);
    std::copy_n(e->type_ids.begin(), n, types + b * S);
    std::fill_n(mask + b * S, n, 1);
    if (tokens) {
      for (int64_t s = 0; s < n; ++s) {
        if (labels) labels[b * S + s] = e->labels[s];
        counted += e->labels[s] != -100;
      }
    } else {
      if (labels) labels[b] = e->labels[0];
      counted += e->labels[0] != -100;
    }
  }
  return counted;
}

Graph classification_graph(const BertConfig& c, Heads heads, int64_t L, int64_t B, int64_t S,
                           bool train, Precision precision, OptimizerKind optimizer) {
  RunSpec run;
  run.batch = B, run.seq = S, run.heads = heads, run.num_labels = L, run.precision = precision;
  run.mode = train ? RunMode::train : RunMode::infer;
  run.optimizer = optimizer;
  Graph g = build_bert(c, run);
  apply_fusions(g);
  return g;
}


int64_t length_quantum(int64_t S) { return std::max<int64_t>(8, (S / 4 + 7) / 8 * 8); }

std::pair<Executor*, int64_t> LengthExecutors::at(const std::vector<const EncodedExample*>& rows) {
  const int64_t S = padded_length(longest_of(rows), S_, group_);
  auto& ex = executors_[S];
  if (!ex) ex = make_(S);
  return {ex.get(), S};
}

EvalResult evaluate_set(LengthExecutors& executors, const EncodedSet& set, int64_t B, Heads heads, int64_t L,
                        const data::BertTokenizer& tok, const LabelSet& labels) {
  std::vector<int32_t> gold, pred;
  double loss = 0;
  run_inference(executors, set, B, heads, L, tok, [&](int64_t i, int64_t s, const std::vector<double>& p) {
    const int32_t g = set.items[i].labels[s < 0 ? 0 : s];
    if (g == -100) return;
    gold.push_back(g);
    pred.push_back(static_cast<int32_t>(std::max_element(p.begin(), p.end()) - p.begin()));
    loss -= std::log(std::max(p[g], 1e-300));
  });
  EvalResult r = classification_metrics(gold, pred, labels);
  r.loss = gold.empty() ? 0 : loss / double(gold.size());
  return r;
}

std::vector<int32_t> majority_counts(const EncodedSet& set, int64_t L) {
  std::vector<int32_t> counts(static_cast<size_t>(L), 0);
  for (const auto& e : set.items)
    for (int32_t l : e.labels)
      if (l != -100) ++counts[l];
  return counts;
}

double EvalResult::metric(FinetuneMetric m) const {
  switch (m) {
    case FinetuneMetric::accuracy: return accuracy;
    case FinetuneMetric::macro_f1: return macro_f1;
  }
  return 0;
}

EvalResult classification_metrics(const std::vector<int32_t>& gold, const std::vector<int32_t>& pred,
                                  const LabelSet& labels) {
  check(gold.size() == pred.size(), "{} gold labels but {} predictions", gold.size(), pred.size());
  const int64_t L = labels.size();
  std::vector<int64_t> tp(L, 0), support(L, 0), predicted(L, 0);
  EvalResult r;
  for (size_t i = 0; i < gold.size(); ++i) {
    if (gold[i] == -100) continue;
    ++r.count, ++support[gold[i]], ++predicted[pred[i]];
    if (gold[i] == pred[i]) ++tp[gold[i]];
  }
  int64_t correct = 0, present = 0;
  double f1_sum = 0;
  for (int64_t l = 0; l < L; ++l) {
    correct += tp[l];
    if (support[l] == 0 && predicted[l] == 0) continue;
    ClassMetrics c;
    c.label = labels.name(static_cast<int32_t>(l));
    c.support = support[l], c.predicted = predicted[l];
    c.precision = predicted[l] ? double(tp[l]) / double(predicted[l]) : 0;
    c.recall = support[l] ? double(tp[l]) / double(support[l]) : 0;
    c.f1 = c.precision + c.recall > 0 ? 2 * c.precision * c.recall / (c.precision + c.recall) : 0;
    f1_sum += c.f1, ++present;
    r.per_class.push_back(c);
  }
  r.accuracy = r.count ? double(correct) / double(r.count) : 0;
  r.macro_f1 = present ? f1_sum / double(present) : 0;
  return r;
}

Heads finetuned_heads(const fs::path& dir) {
  const fs::path file = dir / "config.json";
  if (!fs::exists(file)) return Heads::none;
  auto cfg = read_json_file(file, "model config");
  if (!cfg.contains("architectures") || !cfg["architectures"].is_array()) return Heads::none;
  for (const auto& a : cfg["architectures"]) {
    if (a == kSeqArch) return Heads::sequence_classification;
    if (a == kTokenArch) return Heads::token_classification;
  }
  return Heads::none;
}

int64_t predict(const PredictOptions& o, const std::function<void(const std::string&)>& log) {
  check_tokenizer(o.model);
  const Heads heads = finetuned_heads(o.model);
  check(heads != Heads::none, "{}: not a fine-tuned model (config.json has no architectures {} or {}); "
        "run `bertlab finetune` first", o.model.string(), kSeqArch, kTokenArch);
  const fs::path cfg_file = o.model / "config.json";
  const BertConfig config = load_config(cfg_file);
  const LabelSet labels(id2label(read_json_file(cfg_file, "model config"), cfg_file));
  const int64_t L = labels.size();
  const auto tok = data::BertTokenizer::load(o.model);
  Model model = init_model(config, heads, 0, L);
  check(fs::exists(o.model / "model.safetensors"), "model directory {} has no model.safetensors", o.model.string());
  load_hf_weights(model.params, SafetensorsFile(o.model / "model.safetensors"));

  const TaskKind task = heads == Heads::token_classification ? TaskKind::token_classification
                                                             : TaskKind::sequence_classification;
  const size_t max_len = static_cast<size_t>(std::min(o.max_seq_length, config.max_position_embeddings));
  EncodedSet set = encode_file(o.input, task, tok, nullptr, false, max_len);
  if (set.truncated > 0)
    log(fmt::format("truncated {} of {} examples to {} tokens", set.truncated, set.items.size(), max_len));
  const int64_t S = std::min<int64_t>(static_cast<int64_t>(max_len), (static_cast<int64_t>(set.longest) + 7) / 8 * 8);
  const int64_t B = std::max<int64_t>(1, std::min<int64_t>(o.batch_size, static_cast<int64_t>(set.items.size())));
  LengthExecutors ex(S, false, [&](int64_t s) {
    return std::make_unique<Executor>(classification_graph(config, heads, L, B, s, false, Precision::fp32, OptimizerKind::adamw),
                                      static_cast<const ParamStore&>(model.params));
  });

  // The input again, for the words and texts to echo.
  std::vector<data::TextExample> texts;
  std::vector<data::TaggedSentence> sentences;
  if (task == TaskKind::sequence_classification) texts = data::read_text_examples(o.input, false);
  else sentences = data::read_conll(o.input, false);

  std::vector<nlohmann::json> rows(set.items.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (task == TaskKind::sequence_classification) {
      rows[i] = {{"text", texts[i].text}};
      if (texts[i].has_pair) rows[i]["text_pair"] = texts[i].text_pair;
    } else {
      rows[i] = {{"words", sentences[i].words},
                 {"labels", std::vector<nlohmann::json>(sentences[i].words.size())},
                 {"probabilities", std::vector<nlohmann::json>(sentences[i].words.size())}};
    }
  }
  run_inference(ex, set, B, heads, L, tok, [&](int64_t i, int64_t s, const std::vector<double>& p) {
    const auto best = static_cast<int32_t>(std::max_element(p.begin(), p.end()) - p.begin());
    if (s < 0) {
      nlohmann::json all = nlohmann::json::object();
      for (int32_t l = 0; l < L; ++l) all[labels.name(l)] = p[l];
      rows[i]["label"] = labels.name(best);
      rows[i]["probability"] = p[best];
      rows[i]["probabilities"] = all;
    } else {
      const int32_t w = set.items[i].word_of_token[s];
      rows[i]["labels"][w] = labels.name(best);
      rows[i]["probabilities"][w] = p[best];
    }
  });
  std::string text;
  for (const auto& r : rows) text += r.dump() + "\n";
  write_file_atomic(o.output, text);
  return static_cast<int64_t>(rows.size());
}

}  // namespace bertlab
