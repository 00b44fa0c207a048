// Lab 6, the teachers' solution (labs/README.md: remove solution/ from the students' copy).
#include "labs/tokenize/lab.h"

namespace bertlab::lab::tokenize {

std::vector<std::string> wordpiece(const std::string& word, const std::unordered_set<std::string>& vocab) {
  std::vector<size_t> at;  // byte offset where each character starts, then word.size()
  for (size_t i = 0; i < word.size(); ++i)
    if ((static_cast<unsigned char>(word[i]) & 0xC0) != 0x80) at.push_back(i);
  const size_t n = at.size();
  at.push_back(word.size());
  if (n == 0) return {};
  if (n > kMaxWordChars) return {kUnk};
  std::vector<std::string> pieces;
  for (size_t start = 0; start < n;) {
    size_t end = n;
    std::string piece;
    for (; end > start; --end) {
      piece = (start == 0 ? "" : "##") + word.substr(at[start], at[end] - at[start]);
      if (vocab.count(piece)) break;
    }
    if (end == start) return {kUnk};
    pieces.push_back(piece);
    start = end;
  }
  return pieces;
}

}  // namespace bertlab::lab::tokenize
