// Lab 6's solution with planted bugs (tests/labs/planted.h).
#include <string>
#include <unordered_map>

#include "labs/tokenize/lab.h"
#include "tests/labs/planted.h"

namespace bertlab::lab::tokenize {

using planted::bug;

namespace {

// The greedy split from character `first` on; empty when some rest matches no piece.
std::vector<std::string> greedy(const std::string& word, const std::vector<size_t>& at, size_t first,
                                const std::unordered_set<std::string>& vocab) {
  const size_t n = at.size() - 1;
  std::vector<std::string> pieces;
  for (size_t start = first; start < n;) {
    size_t end = n;
    std::string piece;
    for (; end > start; --end) {
      piece = (start == 0 ? "" : "##") + word.substr(at[start], at[end] - at[start]);
      if (vocab.count(piece)) break;
    }
    if (end == start) return {};
    pieces.push_back(piece);
    start = end;
  }
  return pieces;
}

std::vector<std::string> encode(const std::string& word, const std::unordered_set<std::string>& vocab) {
  std::vector<size_t> at;  // byte offset where each character starts, then word.size()
  for (size_t i = 0; i < word.size(); ++i)
    if ((static_cast<unsigned char>(word[i]) & 0xC0) != 0x80) at.push_back(i);
  // Bug: looks at the first character before handling the empty word (at[0] of an empty vector).
  if (bug("empty_word_crashes")) {
    volatile size_t first = at[0];
    (void)first;
  }
  const size_t n = at.size();
  at.push_back(word.size());
  if (n == 0) return {};
  // Bug: the length limit counts bytes, not characters.
  if ((bug("limit_counts_bytes") ? word.size() : n) > kMaxWordChars) return {kUnk};
  auto pieces = greedy(word, at, 0, vocab);
  // Bug: when the greedy split fails, tries shorter first pieces (backtracking).
  if (pieces.empty() && bug("backtracks"))
    for (size_t end = n - 1; end > 0 && pieces.empty(); --end)
      if (vocab.count(word.substr(0, at[end]))) {
        pieces = greedy(word, at, end, vocab);
        if (!pieces.empty()) pieces.insert(pieces.begin(), word.substr(0, at[end]));
      }
  if (pieces.empty()) return {kUnk};
  return pieces;
}

}  // namespace

std::vector<std::string> wordpiece(const std::string& word, const std::unordered_set<std::string>& vocab) {
  // Bug: remembers every word's pieces from call to call, whatever the vocabulary.
  if (bug("cache_across_vocabularies")) {
    static std::unordered_map<std::string, std::vector<std::string>> cache;
    auto it = cache.find(word);
    if (it == cache.end()) it = cache.emplace(word, encode(word, vocab)).first;
    return it->second;
  }
  return encode(word, vocab);
}

}  // namespace bertlab::lab::tokenize
