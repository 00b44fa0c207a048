#pragma once
// The character classes BERT's BasicTokenizer uses, from libutf8proc's Unicode tables.
namespace bertlab::data::unicode {

bool is_whitespace(char32_t cp);   // space, \t, \n, \r or category Zs
bool is_control(char32_t cp);      // category C* except \t, \n, \r
bool is_punctuation(char32_t cp);  // ASCII 33-47, 58-64, 91-96, 123-126 or category P*
bool is_cjk(char32_t cp);          // the CJK Unified / Compatibility ideograph blocks
bool is_nonspacing_mark(char32_t cp);  // category Mn
// Python's str.split() also splits on these after cleaning (line/paragraph separators).
bool is_split_whitespace(char32_t cp);
int combining_class(char32_t cp);

}  // namespace bertlab::data::unicode
