#include "data/vocab_trainer.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <map>
#include <optional>
#include <queue>
#include <unordered_map>

#include "data/utf8.h"
#include "base/error.h"
#include "base/tsan.h"

namespace bertlab::data {
namespace {

using WordCounts = std::unordered_map<std::string, std::uint64_t>;

WordCounts count_words(const std::vector<Document>& docs, const TokenizerConfig& config,
                       const Progress& progress) {
  BasicTokenizer basic(config);
  const std::size_t chunks = std::min<std::size_t>(docs.size(), 64);
  std::vector<WordCounts> partial(chunks);
  TsanJoin join;
  tbb::parallel_for(std::size_t{0}, chunks, [&](std::size_t c) {
    join.enter();
    Words words;
    std::string w;
    for (std::size_t d = c; d < docs.size(); d += chunks) {
      for (const auto& s : docs[d].sentences) {
        words.clear();
        try {
          basic.split(s, 0, words);
        } catch (const Error& e) {
          fail("{}: {}", docs[d].source, e.what());
        }
        for (std::size_t k = 0; k < words.size(); ++k) {
          w.clear();
          for (auto i = words.starts[k]; i < words.starts[k + 1]; ++i) append_utf8(w, words.chars[i].cp);
          ++partial[c][w];
        }
      }
    }
    join.leave();
  });
  join.joined();
  WordCounts total;
  for (auto& p : partial)
    for (auto& [w, n] : p) total[w] += n;
  if (progress) progress("count words", docs.size(), docs.size());
  return total;
}

struct PairQueueEntry {
  std::uint64_t count;
  std::uint64_t pair;  // (first << 32) | second
  bool operator<(const PairQueueEntry& o) const {  // max-heap: higher count, then smaller pair
    return count != o.count ? count < o.count : pair > o.pair;
  }
};

std::uint64_t key(std::uint32_t a, std::uint32_t b) { return (std::uint64_t{a} << 32) | b; }

}  // namespace

namespace {

using WordList = std::vector<std::pair<std::string, std::uint64_t>>;

// The alphabet: the `limit` most frequent characters of the words, in code point order.
std::vector<char32_t> alphabet_of(const WordList& words, std::size_t limit) {
  std::map<char32_t, std::uint64_t> char_counts;
  for (const auto& [w, n] : words) {
    std::size_t pos = 0, len = 0;
    while (pos < w.size()) {
      char_counts[decode_utf8(w, pos, len)] += n;
      pos += len;
    }
  }
  std::vector<std::pair<char32_t, std::uint64_t>> by_count(char_counts.begin(), char_counts.end());
  std::stable_sort(by_count.begin(), by_count.end(), [](auto& x, auto& y) { return x.second > y.second; });
  if (by_count.size() > limit) by_count.resize(limit);
  std::vector<char32_t> alphabet;
  for (auto& [c, n] : by_count) alphabet.push_back(c);
  std::sort(alphabet.begin(), alphabet.end());
  return alphabet;
}

// The vocabulary as it grows: tokens in id order and their ids.
struct PieceTable {
  std::vector<std::string> tokens;
  std::unordered_map<std::string, std::uint32_t> ids;
  std::uint32_t intern(const std::string& t) {
    auto [it, inserted] = ids.emplace(t, static_cast<std::uint32_t>(tokens.size()));
    if (inserted) tokens.push_back(t);
    return it->second;
  }
};

// The special tokens, the alphabet's characters, then the continuation characters ("##c")
// that occur inside words, in code point order.
PieceTable initial_pieces(const std::vector<std::string>& specials, const std::vector<char32_t>& alphabet,
                          const WordList& words) {
  PieceTable t;
  for (const auto& sp : specials) t.intern(sp);
  std::unordered_map<char32_t, bool> in_alphabet;
  for (char32_t c : alphabet) {
    std::string s;
    append_utf8(s, c);
    t.intern(s);
    in_alphabet[c] = true;
  }
  std::vector<char32_t> inner;
  for (const auto& [w, n] : words) {
    std::size_t pos = 0, len = 0;
    bool first = true;
    while (pos < w.size()) {
      char32_t c = decode_utf8(w, pos, len);
      if (!first && in_alphabet.count(c)) inner.push_back(c);
      first = false;
      pos += len;
    }
  }
  std::sort(inner.begin(), inner.end());
  inner.erase(std::unique(inner.begin(), inner.end()), inner.end());
  for (char32_t c : inner) {
    std::string s = "##";
    append_utf8(s, c);
    t.intern(s);
  }
  return t;
}

// The words as sequences of piece ids and their counts, and the counts of adjacent piece
// pairs with the words they occur in; merge() joins the most frequent pair everywhere.
class PairMerger {
 public:
  // Words with a character outside the alphabet can only become [UNK], and one-piece words
  // have no pair: both are left out.
  PairMerger(const WordList& words, const PieceTable& t) {
    for (const auto& [w, n] : words) {
      std::vector<std::uint32_t> p;
      std::size_t pos = 0, len = 0;
      bool ok = true;
      while (pos < w.size() && ok) {
        char32_t c = decode_utf8(w, pos, len);
        std::string s = pos == 0 ? "" : "##";
        append_utf8(s, c);
        auto it = t.ids.find(s);
        ok = it != t.ids.end();
        if (ok) p.push_back(it->second);
        pos += len;
      }
      if (ok && p.size() >= 2) {
        pieces_.push_back(std::move(p));
        weight_.push_back(n);
      }
    }
    for (std::uint32_t w = 0; w < pieces_.size(); ++w)
      for (std::size_t k = 0; k + 1 < pieces_[w].size(); ++k) {
        auto p = key(pieces_[w][k], pieces_[w][k + 1]);
        pair_count_[p] += weight_[w];
        pair_words_[p].push_back(w);
      }
    for (auto& [p, n] : pair_count_) queue_.push({n, p});
  }

  // The most frequent pair (count, (first << 32) | second) still counted, or none left.
  std::optional<PairQueueEntry> next_pair() {
    while (!queue_.empty()) {
      auto top = queue_.top();
      queue_.pop();
      auto it = pair_count_.find(top.pair);
      std::uint64_t current = it == pair_count_.end() ? 0 : it->second;
      if (current == top.count) return top;
      if (current > 0) queue_.push({current, top.pair});  // a stale entry, requeued at its count
    }
    return std::nullopt;
  }

  // Every occurrence of pair (a, b) becomes piece m; the counts of the pairs around them follow.
  void merge(std::uint64_t pair, std::uint32_t m) {
    const auto a = static_cast<std::uint32_t>(pair >> 32), b = static_cast<std::uint32_t>(pair);
    auto affected = std::move(pair_words_[pair]);
    pair_words_.erase(pair);
    std::sort(affected.begin(), affected.end());
    affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
    touched_.clear();
    for (auto w : affected) merge_in_word(w, a, b, m);
    std::sort(touched_.begin(), touched_.end());
    touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
    for (auto p : touched_) {
      auto c = pair_count_[p];
      if (c == 0)
        pair_count_.erase(p);
      else if (p != pair)
        queue_.push({c, p});
    }
    pair_count_.erase(pair);
  }

 private:
  void merge_in_word(std::uint32_t w, std::uint32_t a, std::uint32_t b, std::uint32_t m) {
    auto& seq = pieces_[w];
    bool present = false;
    for (std::size_t k = 0; k + 1 < seq.size(); ++k) present |= seq[k] == a && seq[k + 1] == b;
    if (!present) return;
    for (std::size_t k = 0; k + 1 < seq.size(); ++k) {
      auto p = key(seq[k], seq[k + 1]);
      pair_count_[p] -= weight_[w];
      touched_.push_back(p);
    }
    std::vector<std::uint32_t> next;
    next.reserve(seq.size());
    for (std::size_t k = 0; k < seq.size(); ++k) {
      if (k + 1 < seq.size() && seq[k] == a && seq[k + 1] == b) {
        next.push_back(m);
        ++k;
      } else {
        next.push_back(seq[k]);
      }
    }
    seq.swap(next);
    for (std::size_t k = 0; k + 1 < seq.size(); ++k) {
      auto p = key(seq[k], seq[k + 1]);
      pair_count_[p] += weight_[w];
      pair_words_[p].push_back(w);
      touched_.push_back(p);
    }
  }

  std::vector<std::vector<std::uint32_t>> pieces_;
  std::vector<std::uint64_t> weight_;
  std::unordered_map<std::uint64_t, std::uint64_t> pair_count_;
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> pair_words_;
  std::priority_queue<PairQueueEntry> queue_;
  std::vector<std::uint64_t> touched_;
};

}  // namespace

Vocab train_wordpiece_vocab(const std::vector<Document>& docs, const VocabTrainerOptions& o,
                            const Progress& progress) {
  const auto specials = o.config.special_tokens();
  check(o.vocab_size > specials.size(), "vocab size {} leaves no room beyond the {} special tokens",
        o.vocab_size, specials.size());
  check(o.limit_alphabet >= 1, "alphabet limit must be at least 1");
  WordCounts counts = count_words(docs, o.config, progress);
  check(!counts.empty(), "the corpus has no words to train a vocabulary on");

  // Words in a fixed order, so that ids and ties never depend on hash-map iteration order.
  WordList words(counts.begin(), counts.end());
  std::sort(words.begin(), words.end());

  PieceTable table = initial_pieces({specials.begin(), specials.end()}, alphabet_of(words, o.limit_alphabet), words);
  check(table.tokens.size() <= o.vocab_size,
        "vocab size {} is smaller than the {} special tokens and {} alphabet pieces; raise "
        "--vocab-size or lower --limit-alphabet", o.vocab_size, specials.size(), table.tokens.size() - specials.size());

  PairMerger merger(words, table);
  const std::size_t target_merges = o.vocab_size - table.tokens.size();
  std::size_t merges = 0;
  while (table.tokens.size() < o.vocab_size) {
    const auto top = merger.next_pair();
    if (!top || top->count < o.min_frequency) break;
    const auto a = static_cast<std::uint32_t>(top->pair >> 32), b = static_cast<std::uint32_t>(top->pair);
    const std::string& tb = table.tokens[b];
    merger.merge(top->pair, table.intern(table.tokens[a] + (tb.starts_with("##") ? tb.substr(2) : tb)));
    ++merges;
    if (progress && (merges % 1000 == 0)) progress("merges", merges, target_merges);
  }
  if (progress) progress("merges", merges, target_merges);
  return Vocab(std::move(table.tokens), "trained vocabulary");
}

void save_vocab_dir(const std::filesystem::path& dir, const Vocab& vocab, const TokenizerConfig& config) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  check(!ec, "{}: cannot create directory: {}", dir.string(), ec.message());
  vocab.save(dir / "vocab.txt");
  config.save(dir / "tokenizer_config.json");
}

VocabReport evaluate_vocab(const BertTokenizer& tokenizer, const std::vector<Document>& docs) {
  BasicTokenizer basic(tokenizer.config());
  VocabReport r;
  Words words;
  std::vector<Piece> pieces;
  for (const auto& d : docs)
    for (const auto& s : d.sentences) {
      bool in_word = false;
      for (char ch : s) {
        bool space = ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
        r.text_words += !space && !in_word;
        in_word = !space;
      }
      words.clear();
      basic.split(s, 0, words);
      for (std::size_t k = 0; k < words.size(); ++k) {
        pieces.clear();
        tokenizer.wordpiece(words.chars.data() + words.starts[k], words.starts[k + 1] - words.starts[k], pieces);
        ++r.words;
        r.tokens += pieces.size();
        for (const auto& p : pieces) r.unknown += p.id == tokenizer.unk_id();
      }
    }
  return r;
}

}  // namespace bertlab::data
