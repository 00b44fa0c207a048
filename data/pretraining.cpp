#include "data/pretraining.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>

#include "base/file_util.h"
#include "base/tsan.h"
#include "data/shard.h"
#include "base/error.h"

namespace bertlab::data {
namespace fs = std::filesystem;
namespace {

// One chunk's loop body for TBB. A named type over a std::function rather than a lambda over
// the caller's lambda: the names of TBB's task types embed the body's type, and with nested
// lambdas they ran to several KB, past what ThreadSanitizer's symbolizer takes, so its reports
// inside TBB's own code lost their function names and tests/sanitizer/tsan.supp could not match
// them (scripts/tsan_run.sh, `prepare`).
struct ChunkBody {
  const std::function<void(std::size_t)>* fn;
  TsanJoin* join;
  void operator()(const tbb::blocked_range<std::size_t>& r) const {
    join->enter();
    for (auto i = r.begin(); i != r.end(); ++i) (*fn)(i);
    join->leave();
  }
};

// Runs fn(i) for i in [0, n) in parallel, in chunks so that progress is reported from the
// calling thread.
void parallel_with_progress(std::size_t n, std::string_view stage, const Progress& progress,
                            const std::function<void(std::size_t)>& fn) {
  const std::size_t chunk = std::max<std::size_t>(64, n / 50);
  for (std::size_t from = 0; from < n; from += chunk) {
    std::size_t to = std::min(n, from + chunk);
    TsanJoin join;
    tbb::parallel_for(tbb::blocked_range<std::size_t>(from, to, 1), ChunkBody{&fn, &join});
    join.joined();
    if (progress) progress(stage, to, n);
  }
}

// Google's truncate_seq_pair: drop from the front or back (at random) of the longer segment.
void truncate_pair(std::vector<std::int32_t>& a, std::vector<std::int32_t>& b, std::size_t max_tokens,
                   Rng& rng) {
  while (a.size() + b.size() > max_tokens) {
    auto& longer = a.size() > b.size() ? a : b;
    if (rng.uniform() < 0.5)
      longer.erase(longer.begin());
    else
      longer.pop_back();
  }
}

// create_instances_from_document of create_pretraining_data.py, for one document.
void instances_from_document(const std::vector<TokenizedDocument>& docs, std::size_t doc_index,
                             const BertTokenizer& tok, const PrepareOptions& o, const MaskingSpec& spec,
                             Rng& rng, std::vector<Instance>& out, SplitStats& stats) {
  const auto& doc = docs[doc_index];
  auto sentence = [](const TokenizedDocument& d, std::size_t k) {
    auto begin = k == 0 ? 0 : d.sentence_end[k - 1];
    return std::pair{d.ids.begin() + begin, d.ids.begin() + d.sentence_end[k]};
  };
  const std::size_t max_num_tokens = o.max_seq_length - 3;
  std::size_t target_seq_length = max_num_tokens;
  if (rng.uniform() < o.short_seq_prob)
    target_seq_length = static_cast<std::size_t>(rng.randint(2, static_cast<std::int64_t>(max_num_tokens)));

  std::vector<std::size_t> chunk;  // sentence indices
  std::size_t chunk_length = 0;
  std::vector<std::int32_t> a, b;
  // Google forces a random B whenever a chunk holds a single sentence, which makes more than
  // half of the pairs random (53.7% on Brown). Here a fair coin alone decides: a chunk of one
  // sentence that must be followed by its actual next sentence takes in the next sentence
  // too, and a lone last sentence of a document is dropped.
  bool actual_next_pending = false;
  for (std::size_t i = 0; i < doc.sentences(); ++i) {
    chunk.push_back(i);
    auto [s_begin, s_end] = sentence(doc, i);
    chunk_length += static_cast<std::size_t>(s_end - s_begin);
    if (i + 1 != doc.sentences() && chunk_length < target_seq_length) continue;
    const bool is_random_next = actual_next_pending ? false : rng.uniform() < 0.5;
    actual_next_pending = false;
    if (!is_random_next && chunk.size() == 1) {
      if (i + 1 < doc.sentences()) {
        actual_next_pending = true;
        continue;
      }
      break;
    }
    std::size_t a_end = 1;
    if (chunk.size() >= 2) a_end = static_cast<std::size_t>(rng.randint(1, static_cast<std::int64_t>(chunk.size()) - 1));
    a.clear();
    b.clear();
    for (std::size_t j = 0; j < a_end; ++j) {
      auto [sb, se] = sentence(doc, chunk[j]);
      a.insert(a.end(), sb, se);
    }
    if (is_random_next) {
      std::size_t target_b_length = target_seq_length > a.size() ? target_seq_length - a.size() : 0;
      std::size_t random_doc = doc_index;
      for (int attempt = 0; attempt < 10; ++attempt) {
        random_doc = static_cast<std::size_t>(rng.randint(0, static_cast<std::int64_t>(docs.size()) - 1));
        if (random_doc != doc_index) break;
      }
      const auto& other = docs[random_doc];
      auto start = static_cast<std::size_t>(rng.randint(0, static_cast<std::int64_t>(other.sentences()) - 1));
      for (std::size_t j = start; j < other.sentences(); ++j) {
        auto [sb, se] = sentence(other, j);
        b.insert(b.end(), sb, se);
        if (b.size() >= target_b_length) break;
      }
      // The unused sentences of this chunk go back to the document for the next instance.
      i -= chunk.size() - a_end;
    } else {
      for (std::size_t j = a_end; j < chunk.size(); ++j) {
        auto [sb, se] = sentence(doc, chunk[j]);
        b.insert(b.end(), sb, se);
      }
    }
    truncate_pair(a, b, max_num_tokens, rng);
    chunk.clear();
    chunk_length = 0;
    if (a.empty() || b.empty()) continue;

    Instance inst;
    inst.tokens.reserve(a.size() + b.size() + 3);
    inst.tokens.push_back(tok.cls_id());
    inst.tokens.insert(inst.tokens.end(), a.begin(), a.end());
    inst.tokens.push_back(tok.sep_id());
    inst.tokens.insert(inst.tokens.end(), b.begin(), b.end());
    inst.tokens.push_back(tok.sep_id());
    inst.len_a = static_cast<std::uint16_t>(a.size());
    inst.is_random_next = is_random_next;
    mask_tokens(inst.tokens, spec, rng, inst.masked_positions, inst.masked_labels, &stats.masking);
    stats.tokens += inst.tokens.size();
    stats.random_next += is_random_next;
    out.push_back(std::move(inst));
  }
}

void add(SplitStats& into, const SplitStats& s) {
  into.tokens += s.tokens;
  into.random_next += s.random_next;
  into.masking.masked += s.masking.masked;
  into.masking.replaced_by_mask += s.masking.replaced_by_mask;
  into.masking.replaced_by_random += s.masking.replaced_by_random;
  into.masking.kept += s.masking.kept;
}

std::uint64_t vocab_checksum(const Vocab& vocab) {
  std::string all;
  for (const auto& t : vocab.tokens()) {
    all += t;
    all += '\n';
  }
  return fnv1a64(all.data(), all.size());
}

nlohmann::json split_json(const SplitStats& s, const std::vector<std::string>& shards) {
  return {{"documents", s.documents},
          {"instances", s.instances},
          {"tokens", s.tokens},
          {"random_next", s.random_next},
          {"masked", s.masking.masked},
          {"masked_as_mask", s.masking.replaced_by_mask},
          {"masked_as_random", s.masking.replaced_by_random},
          {"masked_kept", s.masking.kept},
          {"shards", shards}};
}

}  // namespace

HeldOutSplit split_documents(std::size_t n, double eval_fraction, std::uint64_t seed) {
  check(eval_fraction >= 0 && eval_fraction < 1, "eval fraction must be in [0, 1), got {}", eval_fraction);
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  Rng rng(seed, {0x5E1D});
  rng.shuffle(order.begin(), order.end());
  std::size_t held = static_cast<std::size_t>(std::llround(static_cast<double>(n) * eval_fraction));
  if (eval_fraction > 0 && held == 0 && n > 0) held = 1;
  HeldOutSplit split;
  split.eval.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(std::min(held, n)));
  split.train.assign(order.begin() + static_cast<std::ptrdiff_t>(std::min(held, n)), order.end());
  return split;
}

std::vector<TokenizedDocument> tokenize_documents(const BertTokenizer& tokenizer,
                                                  const std::vector<Document>& docs,
                                                  const Progress& progress) {
  std::vector<TokenizedDocument> out(docs.size());
  parallel_with_progress(docs.size(), "tokenize", progress, [&](std::size_t d) {
    std::vector<Piece> pieces;
    auto& td = out[d];
    for (const auto& s : docs[d].sentences) {
      pieces.clear();
      try {
        tokenizer.tokenize(s, pieces);
      } catch (const Error& e) {
        fail("{}: {}", docs[d].source, e.what());
      }
      if (pieces.empty()) continue;
      for (const auto& p : pieces) td.ids.push_back(p.id);
      td.sentence_end.push_back(static_cast<std::uint32_t>(td.ids.size()));
    }
  });
  return out;
}

std::vector<std::uint8_t> token_kinds(const BertTokenizer& tokenizer) {
  const auto& tokens = tokenizer.vocab().tokens();
  std::vector<std::uint8_t> kinds(tokens.size(), kTokenWordStart);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokenizer.is_special(static_cast<std::int32_t>(i)))
      kinds[i] = kTokenSpecial;
    else if (tokens[i].size() > 2 && tokens[i].starts_with("##"))
      kinds[i] = kTokenContinuation;
  }
  return kinds;
}

MaskingSpec masking_spec(const BertTokenizer& tokenizer, const PrepareOptions& options,
                         const std::vector<std::uint8_t>& kinds) {
  MaskingSpec spec;
  spec.masked_lm_prob = options.masked_lm_prob;
  spec.max_predictions = options.max_predictions_per_seq;
  spec.whole_word = options.whole_word_mask;
  spec.cls_id = tokenizer.cls_id();
  spec.sep_id = tokenizer.sep_id();
  spec.mask_id = tokenizer.mask_id();
  spec.vocab_size = tokenizer.vocab().size();
  spec.token_kind = &kinds;
  // Random replacements are redrawn until not special: without one ordinary token that never ends.
  check(std::any_of(kinds.begin(), kinds.end(), [](std::uint8_t k) { return k != kTokenSpecial; }),
        "the vocabulary holds only special tokens ({} of them); masking needs ordinary tokens to draw "
        "random replacements from", kinds.size());
  return spec;
}

std::vector<Instance> packed_instances(const std::vector<TokenizedDocument>& docs,
                                       const BertTokenizer& tok, const PrepareOptions& o,
                                       const MaskingSpec& spec, Rng& rng, SplitStats& stats) {
  std::vector<Instance> out;
  Instance inst;
  auto start = [&] {
    inst = Instance{};
    inst.tokens.reserve(o.max_seq_length);
    inst.tokens.push_back(tok.cls_id());
  };
  auto push = [&](std::int32_t id) {
    inst.tokens.push_back(id);
    if (inst.tokens.size() < o.max_seq_length) return;
    inst.len_a = static_cast<std::uint16_t>(o.max_seq_length - 2);  // every token type 0
    mask_tokens(inst.tokens, spec, rng, inst.masked_positions, inst.masked_labels, &stats.masking);
    stats.tokens += inst.tokens.size();
    out.push_back(std::move(inst));
    start();
  };
  start();
  for (const auto& doc : docs) {
    for (std::int32_t id : doc.ids) push(id);
    push(tok.sep_id());
  }
  return out;
}

std::vector<Instance> create_instances(const std::vector<TokenizedDocument>& docs,
                                       const BertTokenizer& tokenizer, const PrepareOptions& o,
                                       std::uint64_t stream, SplitStats& stats,
                                       const Progress& progress) {
  check(o.max_seq_length >= 5 && o.max_seq_length <= 65535,
        "seq-len must be in [5, 65535], got {}", o.max_seq_length);
  check(o.masked_lm_prob > 0 && o.masked_lm_prob < 1, "masked-lm-prob must be in (0, 1), got {}", o.masked_lm_prob);
  check(o.short_seq_prob >= 0 && o.short_seq_prob <= 1, "short-seq-prob must be in [0, 1], got {}", o.short_seq_prob);
  check(o.max_predictions_per_seq >= 1, "max-predictions must be at least 1");
  check(o.dupe_factor >= 1, "dupe-factor must be at least 1");
  const auto kinds = token_kinds(tokenizer);
  const MaskingSpec spec = masking_spec(tokenizer, o, kinds);
  if (o.pack) {
    // Sequential within a pass (the documents run into each other); one stream per pass.
    std::vector<Instance> all;
    for (std::size_t dupe = 0; dupe < o.dupe_factor; ++dupe) {
      Rng rng(o.seed, {stream, dupe, 0xBAC4});
      for (auto& inst : packed_instances(docs, tokenizer, o, spec, rng, stats)) all.push_back(std::move(inst));
      if (progress) progress("instances", dupe + 1, o.dupe_factor);
    }
    Rng shuffle_rng(o.seed, {stream, 0xF1A7});
    shuffle_rng.shuffle(all.begin(), all.end());
    stats.documents = docs.size();
    stats.instances = all.size();
    return all;
  }
  const std::size_t tasks = o.dupe_factor * docs.size();
  std::vector<std::vector<Instance>> per_task(tasks);
  std::vector<SplitStats> per_task_stats(tasks);
  parallel_with_progress(tasks, "instances", progress, [&](std::size_t t) {
    std::size_t dupe = t / docs.size(), d = t % docs.size();
    Rng rng(o.seed, {stream, dupe, d});
    instances_from_document(docs, d, tokenizer, o, spec, rng, per_task[t], per_task_stats[t]);
  });
  std::vector<Instance> all;
  for (std::size_t t = 0; t < tasks; ++t) {
    add(stats, per_task_stats[t]);
    for (auto& inst : per_task[t]) all.push_back(std::move(inst));
  }
  Rng shuffle_rng(o.seed, {stream, 0xF1A7});
  shuffle_rng.shuffle(all.begin(), all.end());
  stats.documents = docs.size();
  stats.instances = all.size();
  return all;
}

PrepareStats prepare_pretraining_data(const std::vector<Document>& corpus,
                                      const BertTokenizer& tokenizer, const PrepareOptions& o,
                                      const fs::path& out_dir, const Progress& progress) {
  check(o.instances_per_shard >= 1, "instances per shard must be at least 1");
  std::error_code ec;
  if (fs::exists(out_dir, ec)) {
    check(o.overwrite || (fs::is_directory(out_dir, ec) && fs::is_empty(out_dir, ec)),
          "{}: output directory already exists and is not empty (pass --force to replace it)",
          out_dir.string());
    check(fs::is_directory(out_dir, ec), "{}: exists and is not a directory", out_dir.string());
  }
  auto tokenized = tokenize_documents(tokenizer, corpus, progress);
  // Google drops documents without any sentence.
  std::vector<std::size_t> nonempty;
  for (std::size_t d = 0; d < tokenized.size(); ++d)
    if (tokenized[d].sentences() > 0) nonempty.push_back(d);
  const auto split = split_documents(nonempty.size(), o.eval_fraction, o.seed);
  check(split.train.size() >= (o.pack ? 1u : 2u),
        "corpus too small: {} non-empty documents leave {} for training after holding out {} "
        "for evaluation; next-sentence pairs need at least 2 training documents",
        nonempty.size(), split.train.size(), split.eval.size());
  auto gather = [&](const std::vector<std::size_t>& idx) {
    std::vector<TokenizedDocument> docs;
    docs.reserve(idx.size());
    for (auto i : idx) docs.push_back(std::move(tokenized[nonempty[i]]));
    return docs;
  };
  auto train_docs = gather(split.train), eval_docs = gather(split.eval);

  PrepareStats stats;
  auto train = create_instances(train_docs, tokenizer, o, 1, stats.train, progress);
  std::vector<Instance> eval;
  if (!eval_docs.empty()) eval = create_instances(eval_docs, tokenizer, o, 2, stats.eval, progress);
  check(!train.empty(), "corpus too small: no training instances could be made from {} documents",
        train_docs.size());

  // Build everything in a temporary directory beside the target, then rename it into place.
  fs::path parent = out_dir.parent_path().empty() ? fs::path(".") : out_dir.parent_path();
  fs::create_directories(parent, ec);
  check(!ec, "{}: cannot create directory: {}", parent.string(), ec.message());
  fs::path tmp = temporary_sibling(out_dir);
  fs::create_directory(tmp, ec);
  check(!ec, "{}: cannot create directory: {}", tmp.string(), ec.message());
  try {
    ShardInfo info;
    info.max_seq_length = static_cast<std::uint32_t>(o.max_seq_length);
    info.max_predictions = static_cast<std::uint32_t>(o.max_predictions_per_seq);
    info.vocab_size = static_cast<std::uint32_t>(tokenizer.vocab().size());
    info.whole_word_mask = o.whole_word_mask;
    info.vocab_checksum = vocab_checksum(tokenizer.vocab());
    auto write_split = [&](const std::vector<Instance>& instances, const std::string& name, SplitStats& s) {
      std::vector<std::string> names;
      for (std::size_t from = 0, k = 0; from < instances.size(); from += o.instances_per_shard, ++k) {
        std::size_t to = std::min(instances.size(), from + o.instances_per_shard);
        names.push_back(fmt::format("{}-{:05d}.shard", name, k));
        write_shard(tmp / names.back(), info, instances.data() + from, to - from);
        if (progress) progress("write " + name, to, instances.size());
      }
      s.shards = names.size();
      return names;
    };
    auto train_shards = write_split(train, "train", stats.train);
    auto eval_shards = write_split(eval, "eval", stats.eval);
    tokenizer.vocab().save(tmp / "vocab.txt");
    tokenizer.config().save(tmp / "tokenizer_config.json");
    nlohmann::json meta = {
        {"format", "bertlab-pretraining-data"},
        {"version", kShardVersion},
        {"max_seq_length", o.max_seq_length},
        {"max_predictions_per_seq", o.max_predictions_per_seq},
        {"masked_lm_prob", o.masked_lm_prob},
        {"short_seq_prob", o.short_seq_prob},
        {"dupe_factor", o.dupe_factor},
        {"whole_word_mask", o.whole_word_mask},
        {"packed", o.pack},
        {"seed", o.seed},
        {"eval_fraction", o.eval_fraction},
        {"vocab_size", tokenizer.vocab().size()},
        {"vocab_checksum", fmt::format("{:016x}", info.vocab_checksum)},
        {"train", split_json(stats.train, train_shards)},
        {"eval", split_json(stats.eval, eval_shards)},
    };
    write_file_atomic(tmp / "meta.json", meta.dump(2) + "\n");
    auto rename = [](const fs::path& from, const fs::path& to) {
      std::error_code e;
      fs::rename(from, to, e);
      check(!e, "{}: cannot rename {} into place: {}", to.string(), from.string(), e.message());
    };
    if (fs::exists(out_dir, ec)) {  // --force: swap the old directory out, then delete it
      fs::path old = temporary_sibling(out_dir);
      rename(out_dir, old);
      rename(tmp, out_dir);
      fs::remove_all(old, ec);
    } else {
      rename(tmp, out_dir);
    }
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  return stats;
}

}  // namespace bertlab::data
