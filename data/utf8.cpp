#include "data/utf8.h"

#include <utf8proc.h>

namespace bertlab::data {

std::size_t find_invalid_utf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  std::size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    utf8proc_int32_t cp = 0;
    auto len = utf8proc_iterate(bytes + pos, static_cast<utf8proc_ssize_t>(text.size() - pos), &cp);
    if (len <= 0 || cp < 0) return pos;
    pos += static_cast<std::size_t>(len);
  }
  return std::string_view::npos;
}

char32_t decode_utf8(std::string_view text, std::size_t pos, std::size_t& len) {
  auto c = static_cast<unsigned char>(text[pos]);
  if (c < 0x80) {
    len = 1;
    return c;
  }
  utf8proc_int32_t cp = 0;
  auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data()) + pos,
                            static_cast<utf8proc_ssize_t>(text.size() - pos), &cp);
  if (n <= 0 || cp < 0) {  // callers validate first; be safe and consume one byte as U+FFFD
    len = 1;
    return 0xFFFD;
  }
  len = static_cast<std::size_t>(n);
  return static_cast<char32_t>(cp);
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
    return;
  }
  utf8proc_uint8_t buf[4];
  auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
}

}  // namespace bertlab::data
