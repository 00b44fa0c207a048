#pragma once
// A WordPiece tokenizer that behaves like Hugging Face's BertTokenizer (the Python one):
//   special tokens split out whole -> BasicTokenizer (clean, CJK spacing, NFC, whitespace
//   split, lowercase, strip accents, punctuation split) -> greedy longest-match WordPiece.
// Offsets are byte ranges [begin, end) into the text the token came from.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/vocab.h"

namespace bertlab::data {

// One code point of normalised text and the bytes of the original text it came from.
struct SpannedChar {
  char32_t cp;
  std::uint32_t begin, end;
};

// Words of BasicTokenizer output, stored flat: word i is chars[starts[i], starts[i+1]).
struct Words {
  std::vector<SpannedChar> chars;
  std::vector<std::uint32_t> starts;  // one more than the number of words
  std::size_t size() const { return starts.empty() ? 0 : starts.size() - 1; }
  void clear() {
    chars.clear();
    starts.clear();
  }
};

// The text-normalising half of BertTokenizer. Throws bertlab::Error on invalid UTF-8.
class BasicTokenizer {
 public:
  explicit BasicTokenizer(const TokenizerConfig& config) : config_(config) {}
  // Appends the words of text[0, size) to `out`; offsets are shifted by `base`.
  void split(std::string_view text, std::uint32_t base, Words& out) const;
  std::vector<std::string> split(std::string_view text) const;

 private:
  TokenizerConfig config_;
};

struct Piece {
  std::int32_t id;
  std::uint32_t begin, end;  // bytes of the original text
};

struct EncodeOptions {
  bool add_special_tokens = true;
  // Truncate (longest first) to max_length, or to model_max_length when max_length is unset.
  bool truncation = false;
  std::optional<std::size_t> max_length;
  bool pad_to_max_length = false;  // pad on the right with [PAD] up to max_length
};

struct Encoding {
  std::vector<std::int32_t> ids;
  std::vector<std::int32_t> type_ids;        // 0 for [CLS] A [SEP], 1 for B [SEP]
  std::vector<std::int32_t> attention_mask;  // 1 for real tokens, 0 for padding
  std::vector<std::int32_t> special_tokens_mask;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> offsets;  // (0, 0) for special/padding
};

class BertTokenizer {
 public:
  // Throws when the vocabulary lacks one of the configured special tokens.
  BertTokenizer(Vocab vocab, TokenizerConfig config);
  // Reads DIR/vocab.txt and, when present, DIR/tokenizer_config.json.
  static BertTokenizer load(const std::filesystem::path& dir);

  // Word pieces of `text` without [CLS]/[SEP]; special tokens written in the text stay whole.
  void tokenize(std::string_view text, std::vector<Piece>& out) const;
  std::vector<std::string> tokenize(std::string_view text) const;
  std::vector<std::int32_t> encode_ids(std::string_view text) const;  // ids, no specials
  // Pieces of one word produced by BasicTokenizer (exposed for the vocabulary report).
  void wordpiece(const SpannedChar* chars, std::size_t n, std::vector<Piece>& out) const;

  Encoding encode(std::string_view a, std::optional<std::string_view> b = std::nullopt,
                  const EncodeOptions& options = {}) const;

  const Vocab& vocab() const { return vocab_; }
  const TokenizerConfig& config() const { return config_; }
  std::int32_t pad_id() const { return pad_id_; }
  std::int32_t unk_id() const { return unk_id_; }
  std::int32_t cls_id() const { return cls_id_; }
  std::int32_t sep_id() const { return sep_id_; }
  std::int32_t mask_id() const { return mask_id_; }
  bool is_special(std::int32_t id) const {
    return id == pad_id_ || id == unk_id_ || id == cls_id_ || id == sep_id_ || id == mask_id_;
  }

  static constexpr std::size_t kMaxWordChars = 100;  // longer words become one [UNK]

 private:
  Vocab vocab_;
  TokenizerConfig config_;
  BasicTokenizer basic_;
  std::int32_t pad_id_, unk_id_, cls_id_, sep_id_, mask_id_;
  PieceTrie first_pieces_;         // every token: the first piece of a word
  PieceTrie continuation_pieces_;  // "##x" tokens as "x": the pieces after the first
  std::vector<std::string> specials_;
};

}  // namespace bertlab::data
