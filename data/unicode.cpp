#include "data/unicode.h"

#include <utf8proc.h>

namespace bertlab::data::unicode {
namespace {
utf8proc_category_t category(char32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}
}  // namespace

bool is_whitespace(char32_t cp) {
  if (cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r') return true;
  if (cp < 0x80) return false;
  return category(cp) == UTF8PROC_CATEGORY_ZS;
}

bool is_control(char32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  if (cp < 0x80) return cp < 0x20 || cp == 0x7F;
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
      return true;
    default:
      return false;
  }
}

bool is_punctuation(char32_t cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
      (cp >= 123 && cp <= 126))
    return true;
  if (cp < 0x80) return false;
  auto c = category(cp);
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

bool is_cjk(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

bool is_nonspacing_mark(char32_t cp) {
  return cp >= 0x300 && category(cp) == UTF8PROC_CATEGORY_MN;
}

bool is_split_whitespace(char32_t cp) { return cp == ' ' || cp == 0x2028 || cp == 0x2029; }

int combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  return utf8proc_get_property(static_cast<utf8proc_int32_t>(cp))->combining_class;
}

}  // namespace bertlab::data::unicode
