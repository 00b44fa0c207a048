#pragma once
// Lab 6: the function you write in labs/tokenize/student.cpp.
//
// WordPiece splits one word (a word of BERT's BasicTokenizer output: already lower-cased, accents
// stripped, punctuation split off) into pieces of the vocabulary, greedily, longest match first:
//   start at the first character; take the LONGEST prefix of the rest of the word that is in the
//   vocabulary (a piece that does not start the word is looked up with the prefix "##", e.g.
//   "##ing"); emit it and continue after it. No backtracking: when no prefix of the rest is in the
//   vocabulary, the WHOLE word becomes the single piece [UNK] (pieces found so far are dropped).
//   A word longer than kMaxWordChars characters is one [UNK] without looking anything up.
// Characters are Unicode code points: `word` is UTF-8, and a piece never splits a code point (a
// byte 10xxxxxx continues the code point before it). An empty word has no pieces.
#include <cstddef>
#include <string>
#include <unordered_set>
#include <vector>

namespace bertlab::lab::tokenize {

inline constexpr std::size_t kMaxWordChars = 100;  // BERT's max_input_chars_per_word
inline constexpr const char* kUnk = "[UNK]";

std::vector<std::string> wordpiece(const std::string& word, const std::unordered_set<std::string>& vocab);

}  // namespace bertlab::lab::tokenize
