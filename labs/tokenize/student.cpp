// Lab 6: WordPiece, longest match first (labs/tokenize/README.md). Read labs/tokenize/lab.h for
// the exact rules. Replace the `throw` with your code. Check with: ./build/bertlab lab check tokenize
#include <stdexcept>

#include "labs/tokenize/lab.h"

namespace bertlab::lab::tokenize {

std::vector<std::string> wordpiece(const std::string& word, const std::unordered_set<std::string>& vocab) {
  // 1. Find where each character (code point) of `word` starts; more than kMaxWordChars -> {kUnk}.
  // 2. From `start`, try the longest candidate first, "##" in front unless start == 0.
  // 3. No candidate found -> {kUnk} for the whole word.
  throw std::logic_error("wordpiece is not written yet (labs/tokenize/student.cpp)");
}

}  // namespace bertlab::lab::tokenize
