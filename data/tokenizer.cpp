#include "data/tokenizer.h"

#include <utf8proc.h>

#include <algorithm>

#include "data/unicode.h"
#include "data/utf8.h"
#include "base/error.h"

namespace bertlab::data {
namespace {

using Chars = std::vector<SpannedChar>;

// Decodes `text`, drops NUL, U+FFFD and control characters, maps whitespace to a space and
// puts spaces around CJK ideographs (BasicTokenizer._clean_text and _tokenize_chinese_chars).
void clean(std::string_view text, std::uint32_t base, bool space_cjk, Chars& out) {
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  std::size_t pos = 0;
  while (pos < text.size()) {
    char32_t cp;
    std::size_t len;
    auto byte = static_cast<unsigned char>(text[pos]);
    if (byte < 0x80) {
      cp = byte;
      len = 1;
    } else {
      utf8proc_int32_t c = 0;
      auto n = utf8proc_iterate(bytes + pos, static_cast<utf8proc_ssize_t>(text.size() - pos), &c);
      check(n > 0 && c >= 0, "invalid UTF-8 at byte {}", base + pos + 1);
      cp = static_cast<char32_t>(c);
      len = static_cast<std::size_t>(n);
    }
    auto begin = static_cast<std::uint32_t>(base + pos), end = static_cast<std::uint32_t>(base + pos + len);
    pos += len;
    if (cp == 0 || cp == 0xFFFD || unicode::is_control(cp)) continue;
    if (unicode::is_whitespace(cp)) {
      out.push_back({U' ', begin, end});
    } else if (space_cjk && cp >= 0x3400 && unicode::is_cjk(cp)) {
      out.push_back({U' ', begin, begin});
      out.push_back({cp, begin, end});
      out.push_back({U' ', end, end});
    } else {
      out.push_back({cp, begin, end});
    }
  }
}

// Stable sort of each run of non-starters by combining class (canonical ordering).
void canonical_order(Chars& chars, std::size_t from) {
  std::size_t i = from;
  while (i < chars.size()) {
    if (unicode::combining_class(chars[i].cp) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < chars.size() && unicode::combining_class(chars[j].cp) != 0) ++j;
    std::stable_sort(chars.begin() + static_cast<std::ptrdiff_t>(i),
                     chars.begin() + static_cast<std::ptrdiff_t>(j),
                     [](const SpannedChar& x, const SpannedChar& y) {
                       return unicode::combining_class(x.cp) < unicode::combining_class(y.cp);
                     });
    i = j;
  }
}

// Appends the canonical decomposition of c, each code point keeping c's span.
void decompose(const SpannedChar& c, Chars& out) {
  if (c.cp < 0xC0) {
    out.push_back(c);
    return;
  }
  utf8proc_int32_t buf[32];
  int boundclass = 0;
  auto n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c.cp), buf, 32,
                                   UTF8PROC_DECOMPOSE, &boundclass);
  if (n <= 0 || n > 32) {
    out.push_back(c);
    return;
  }
  for (utf8proc_ssize_t k = 0; k < n; ++k) out.push_back({static_cast<char32_t>(buf[k]), c.begin, c.end});
}

bool compose_pair(char32_t a, char32_t b, char32_t& composed) {
  if (b < 0x300) return false;  // no canonical composition has a second character below U+0300
  utf8proc_int32_t buf[2] = {static_cast<utf8proc_int32_t>(a), static_cast<utf8proc_int32_t>(b)};
  // STABLE makes utf8proc honour the composition exclusions, as its own NFC does.
  if (utf8proc_normalize_utf32(buf, 2, static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE | UTF8PROC_STABLE)) != 1)
    return false;
  composed = static_cast<char32_t>(buf[0]);
  return true;
}

// NFC of one whitespace-free token, keeping for each output character the span of the
// characters composed into it.
void nfc(Chars& token, Chars& scratch) {
  bool ascii_like = std::all_of(token.begin(), token.end(), [](const SpannedChar& c) { return c.cp < 0x300; });
  if (ascii_like) return;  // text below U+0300 is already NFC and cannot compose
  scratch.clear();
  for (const auto& c : token) decompose(c, scratch);
  canonical_order(scratch, 0);
  token.clear();
  std::ptrdiff_t starter = -1;
  int last_class = -1;  // combining class of the last character kept after the starter
  for (const auto& c : scratch) {
    int cc = unicode::combining_class(c.cp);
    char32_t composed;
    if (starter >= 0 && (last_class == -1 || last_class < cc) &&
        compose_pair(token[static_cast<std::size_t>(starter)].cp, c.cp, composed)) {
      auto& s = token[static_cast<std::size_t>(starter)];
      s.cp = composed;
      s.begin = std::min(s.begin, c.begin);
      s.end = std::max(s.end, c.end);
      continue;
    }
    if (cc == 0) {
      starter = static_cast<std::ptrdiff_t>(token.size());
      last_class = -1;
    } else {
      last_class = cc;
    }
    token.push_back(c);
  }
}

bool is_cased(char32_t cp) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT ||
         utf8proc_islower(static_cast<utf8proc_int32_t>(cp)) ||
         utf8proc_isupper(static_cast<utf8proc_int32_t>(cp));
}

// Unicode's Case_Ignorable: Mn, Me, Cf, Lm, Sk, or Word_Break MidLetter / MidNumLet /
// Single_Quote. libutf8proc has no Word_Break property, so those code points are listed.
bool is_case_ignorable(char32_t cp) {
  switch (cp) {
    case 0x27: case 0x2E: case 0x3A: case 0xB7: case 0x387: case 0x55F: case 0x5F4:
    case 0x2018: case 0x2019: case 0x2024: case 0x2027: case 0xFE13: case 0xFE52:
    case 0xFE55: case 0xFF07: case 0xFF0E: case 0xFF1A:
      return true;
    default:
      break;
  }
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK:
      return true;
    default:
      return false;
  }
}

// Python's str.lower(): simple case mapping plus the two context-free/contextual full
// mappings that differ from it (U+0130 and the final sigma rule).
void lowercase(Chars& token, Chars& scratch) {
  bool ascii = std::all_of(token.begin(), token.end(), [](const SpannedChar& c) { return c.cp < 0x80; });
  if (ascii) {
    for (auto& c : token)
      if (c.cp >= 'A' && c.cp <= 'Z') c.cp += 'a' - 'A';
    return;
  }
  scratch.clear();
  for (std::size_t i = 0; i < token.size(); ++i) {
    SpannedChar c = token[i];
    if (c.cp == 0x130) {  // LATIN CAPITAL LETTER I WITH DOT ABOVE -> i + COMBINING DOT ABOVE
      scratch.push_back({U'i', c.begin, c.end});
      scratch.push_back({0x307, c.begin, c.end});
      continue;
    }
    if (c.cp == 0x3A3) {  // GREEK CAPITAL SIGMA: final form at the end of a cased word
      std::ptrdiff_t j = static_cast<std::ptrdiff_t>(i) - 1;
      while (j >= 0 && is_case_ignorable(token[static_cast<std::size_t>(j)].cp)) --j;
      bool final_sigma = j >= 0 && is_cased(token[static_cast<std::size_t>(j)].cp);
      if (final_sigma) {
        std::size_t k = i + 1;
        while (k < token.size() && is_case_ignorable(token[k].cp)) ++k;
        final_sigma = k == token.size() || !is_cased(token[k].cp);
      }
      scratch.push_back({final_sigma ? char32_t{0x3C2} : char32_t{0x3C3}, c.begin, c.end});
      continue;
    }
    c.cp = static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c.cp)));
    scratch.push_back(c);
  }
  token.swap(scratch);
}

// NFD, then drop nonspacing marks (BasicTokenizer._run_strip_accents).
void strip_accents(Chars& token, Chars& scratch) {
  bool ascii = std::all_of(token.begin(), token.end(), [](const SpannedChar& c) { return c.cp < 0x80; });
  if (ascii) return;
  scratch.clear();
  for (const auto& c : token) decompose(c, scratch);
  canonical_order(scratch, 0);
  token.clear();
  for (const auto& c : scratch)
    if (!unicode::is_nonspacing_mark(c.cp)) token.push_back(c);
}

}  // namespace

void BasicTokenizer::split(std::string_view text, std::uint32_t base, Words& out) const {
  thread_local Chars cleaned, token, scratch;
  cleaned.clear();
  clean(text, base, config_.tokenize_chinese_chars, cleaned);
  if (out.starts.empty()) out.starts.push_back(static_cast<std::uint32_t>(out.chars.size()));
  const bool lower = config_.do_lower_case, strip = config_.strips_accents();
  std::size_t i = 0;
  while (i < cleaned.size()) {
    if (unicode::is_split_whitespace(cleaned[i].cp)) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < cleaned.size() && !unicode::is_split_whitespace(cleaned[j].cp)) ++j;
    token.assign(cleaned.begin() + static_cast<std::ptrdiff_t>(i), cleaned.begin() + static_cast<std::ptrdiff_t>(j));
    i = j;
    nfc(token, scratch);
    if (lower) lowercase(token, scratch);
    if (strip) strip_accents(token, scratch);
    // Punctuation characters become words of their own.
    for (const auto& c : token) {
      if (unicode::is_punctuation(c.cp)) {
        if (out.chars.size() != out.starts.back()) out.starts.push_back(static_cast<std::uint32_t>(out.chars.size()));
        out.chars.push_back(c);
        out.starts.push_back(static_cast<std::uint32_t>(out.chars.size()));
      } else {
        out.chars.push_back(c);
      }
    }
    if (out.chars.size() != out.starts.back()) out.starts.push_back(static_cast<std::uint32_t>(out.chars.size()));
  }
}

std::vector<std::string> BasicTokenizer::split(std::string_view text) const {
  Words words;
  split(text, 0, words);
  std::vector<std::string> out;
  for (std::size_t w = 0; w < words.size(); ++w) {
    std::string s;
    for (auto k = words.starts[w]; k < words.starts[w + 1]; ++k) append_utf8(s, words.chars[k].cp);
    out.push_back(std::move(s));
  }
  return out;
}

BertTokenizer::BertTokenizer(Vocab vocab, TokenizerConfig config)
    : vocab_(std::move(vocab)), config_(std::move(config)), basic_(config_) {
  pad_id_ = vocab_.require(config_.pad_token, "pad_token");
  unk_id_ = vocab_.require(config_.unk_token, "unk_token");
  cls_id_ = vocab_.require(config_.cls_token, "cls_token");
  sep_id_ = vocab_.require(config_.sep_token, "sep_token");
  mask_id_ = vocab_.require(config_.mask_token, "mask_token");
  // WordPiece looks up the first piece of a word among all tokens and every later one among the
  // "##" continuations (without their "##"), as Vocab::find and Vocab::find_continuation do.
  std::vector<PieceTrie::Entry> whole, continuation;
  whole.reserve(vocab_.size());
  for (std::size_t i = 0; i < vocab_.size(); ++i) {
    const std::string& t = vocab_.tokens()[i];
    whole.push_back({t, static_cast<std::int32_t>(i)});
    if (t.size() > 2 && t.starts_with("##"))
      continuation.push_back({std::string_view(t).substr(2), static_cast<std::int32_t>(i)});
  }
  first_pieces_ = PieceTrie(std::move(whole));
  continuation_pieces_ = PieceTrie(std::move(continuation));
  for (const auto& s : config_.special_tokens())
    if (std::find(specials_.begin(), specials_.end(), s) == specials_.end()) specials_.push_back(s);
}

BertTokenizer BertTokenizer::load(const std::filesystem::path& dir) {
  std::error_code ec;
  check(std::filesystem::is_directory(dir, ec), "{}: vocabulary directory does not exist",
        dir.string());
  TokenizerConfig config;
  auto config_file = dir / "tokenizer_config.json";
  if (std::filesystem::exists(config_file, ec)) config = TokenizerConfig::load(config_file);
  return BertTokenizer(Vocab::load(dir / "vocab.txt"), std::move(config));
}

void BertTokenizer::wordpiece(const SpannedChar* chars, std::size_t n, std::vector<Piece>& out) const {
  if (n == 0) return;
  auto span = [&](std::size_t from, std::size_t to) {
    Piece p{0, chars[from].begin, chars[from].end};
    for (std::size_t k = from + 1; k < to; ++k) {
      p.begin = std::min(p.begin, chars[k].begin);
      p.end = std::max(p.end, chars[k].end);
    }
    return p;
  };
  if (n > kMaxWordChars) {
    Piece p = span(0, n);
    p.id = unk_id_;
    out.push_back(p);
    return;
  }
  thread_local std::string word;
  thread_local std::vector<std::uint32_t> at;  // byte offset of each character in `word`
  word.clear();
  at.clear();
  for (std::size_t k = 0; k < n; ++k) {
    at.push_back(static_cast<std::uint32_t>(word.size()));
    append_utf8(word, chars[k].cp);
  }
  at.push_back(static_cast<std::uint32_t>(word.size()));
  const std::size_t mark = out.size();
  std::size_t start = 0;
  while (start < n) {
    // Longest match first: the longest vocabulary piece the rest of the word starts with (one
    // walk down a trie, where the search over every shorter prefix hashed each of them).
    const std::string_view rest(word.data() + at[start], word.size() - at[start]);
    const auto match = (start == 0 ? first_pieces_ : continuation_pieces_).longest_prefix(rest);
    if (match.id < 0) {  // the word cannot be covered: it becomes one [UNK]
      out.resize(mark);
      Piece p = span(0, n);
      p.id = unk_id_;
      out.push_back(p);
      return;
    }
    // The match ends on a character boundary: the character index whose offset it reaches.
    const std::size_t end = static_cast<std::size_t>(
        std::lower_bound(at.begin() + static_cast<std::ptrdiff_t>(start) + 1, at.end(), at[start] + match.bytes) -
        at.begin());
    Piece p = span(start, end);
    p.id = match.id;
    out.push_back(p);
    start = end;
  }
}

void BertTokenizer::tokenize(std::string_view text, std::vector<Piece>& out) const {
  thread_local Words words;
  auto run = [&](std::size_t from, std::size_t to) {
    if (from >= to) return;
    words.clear();
    basic_.split(text.substr(from, to - from), static_cast<std::uint32_t>(from), words);
    for (std::size_t w = 0; w < words.size(); ++w)
      wordpiece(words.chars.data() + words.starts[w], words.starts[w + 1] - words.starts[w], out);
  };
  // Special tokens written in the text are never split (earliest, then longest match). The next
  // occurrence of each is remembered and searched again only once the text before it is
  // consumed, so the text is scanned once per special token, not once per match (a line of
  // 13,000 "[SEP]" took 8.6 s before; found by fuzz_tokenizer).
  thread_local std::vector<std::size_t> next;
  next.assign(specials_.size(), 0);
  for (std::size_t k = 0; k < specials_.size(); ++k) next[k] = text.find(specials_[k]);
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t best = std::string_view::npos, best_len = 0;
    for (std::size_t k = 0; k < specials_.size(); ++k) {
      const auto& s = specials_[k];
      if (next[k] != std::string_view::npos && next[k] < pos) next[k] = text.find(s, pos);
      const auto p = next[k];
      if (p < best || (p == best && p != std::string_view::npos && s.size() > best_len)) {
        best = p;
        best_len = s.size();
      }
    }
    if (best == std::string_view::npos) {
      run(pos, text.size());
      break;
    }
    run(pos, best);
    out.push_back({vocab_.find(text.substr(best, best_len)), static_cast<std::uint32_t>(best),
                   static_cast<std::uint32_t>(best + best_len)});
    pos = best + best_len;
  }
}

std::vector<std::string> BertTokenizer::tokenize(std::string_view text) const {
  std::vector<Piece> pieces;
  tokenize(text, pieces);
  std::vector<std::string> out;
  out.reserve(pieces.size());
  for (const auto& p : pieces) out.push_back(vocab_.token(p.id));
  return out;
}

std::vector<std::int32_t> BertTokenizer::encode_ids(std::string_view text) const {
  std::vector<Piece> pieces;
  tokenize(text, pieces);
  std::vector<std::int32_t> out;
  out.reserve(pieces.size());
  for (const auto& p : pieces) out.push_back(p.id);
  return out;
}

Encoding BertTokenizer::encode(std::string_view a, std::optional<std::string_view> b,
                               const EncodeOptions& options) const {
  std::vector<Piece> pa, pb;
  tokenize(a, pa);
  if (b) tokenize(*b, pb);
  const std::size_t specials = options.add_special_tokens ? (b ? 3 : 2) : 0;
  const std::size_t max_length = options.max_length.value_or(config_.model_max_length);
  if (options.truncation) {
    check(max_length >= specials, "max_length {} is shorter than the {} special tokens", max_length,
          specials);
    // Longest first: drop the last token of the longer sequence (of B on a tie).
    while (pa.size() + pb.size() + specials > max_length && pa.size() + pb.size() > 0) {
      if (!b || pa.size() > pb.size())
        pa.pop_back();
      else
        pb.pop_back();
    }
  }
  Encoding e;
  auto push = [&](std::int32_t id, std::int32_t type, bool special, std::uint32_t begin, std::uint32_t end) {
    e.ids.push_back(id);
    e.type_ids.push_back(type);
    e.attention_mask.push_back(1);
    e.special_tokens_mask.push_back(special ? 1 : 0);
    e.offsets.emplace_back(begin, end);
  };
  if (options.add_special_tokens) push(cls_id_, 0, true, 0, 0);
  for (const auto& p : pa) push(p.id, 0, false, p.begin, p.end);
  if (options.add_special_tokens) push(sep_id_, 0, true, 0, 0);
  if (b) {
    for (const auto& p : pb) push(p.id, 1, false, p.begin, p.end);
    if (options.add_special_tokens) push(sep_id_, 1, true, 0, 0);
  }
  if (options.pad_to_max_length) {
    check(options.max_length.has_value() || config_.model_max_length < (std::size_t{1} << 30),
          "padding needs max_length");
    while (e.ids.size() < max_length) {
      e.ids.push_back(pad_id_);
      e.type_ids.push_back(0);
      e.attention_mask.push_back(0);
      e.special_tokens_mask.push_back(1);
      e.offsets.emplace_back(0, 0);
    }
  }
  return e;
}

}  // namespace bertlab::data
