#pragma once
// UTF-8 validation, decoding and encoding (thin wrappers over libutf8proc).
#include <cstddef>
#include <string>
#include <string_view>

namespace bertlab::data {

// Byte offset of the first invalid UTF-8 sequence in `text`, or npos when it is valid.
std::size_t find_invalid_utf8(std::string_view text);

// Decodes the code point at text[pos]; stores its byte length in `len`. The text must be valid.
char32_t decode_utf8(std::string_view text, std::size_t pos, std::size_t& len);

void append_utf8(std::string& out, char32_t cp);

}  // namespace bertlab::data
