#pragma once
// A WordPiece vocabulary (vocab.txt: one token per line, the line number is the id) and the
// tokenizer settings Hugging Face keeps beside it in tokenizer_config.json.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace bertlab::data {

struct TokenizerConfig {
  bool do_lower_case = true;
  std::optional<bool> strip_accents;  // unset: follow do_lower_case (as Hugging Face does)
  bool tokenize_chinese_chars = true;
  std::size_t model_max_length = 512;
  std::string unk_token = "[UNK]";
  std::string sep_token = "[SEP]";
  std::string pad_token = "[PAD]";
  std::string cls_token = "[CLS]";
  std::string mask_token = "[MASK]";

  bool strips_accents() const { return strip_accents.value_or(do_lower_case); }
  std::vector<std::string> special_tokens() const {
    return {pad_token, unk_token, cls_token, sep_token, mask_token};
  }

  // Reads tokenizer_config.json; fields that are absent keep their defaults. Special tokens
  // may be plain strings or {"content": ...} objects.
  static TokenizerConfig load(const std::filesystem::path& file);
  // The same from the text of such a file; `file` names it in errors.
  static TokenizerConfig parse(std::string_view text, const std::filesystem::path& file);
  void save(const std::filesystem::path& file) const;
};

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIdMap = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

// The keys of a vocabulary as a byte trie, for WordPiece's longest-match-first search: one walk
// along the text finds the longest key that is a prefix of it, where looking up every shorter
// prefix in a hash map costs one hash of the substring per length tried (the tokenizer's
// largest cost before: up to 16 lookups per piece with a 16-byte longest piece).
class PieceTrie {
 public:
  struct Entry {
    std::string_view key;  // needs to live only while the trie is built
    std::int32_t id;
  };
  PieceTrie() = default;
  // Keys must be unique and non-empty.
  explicit PieceTrie(std::vector<Entry> entries);

  struct Match {
    std::int32_t id = -1;  // -1: no key is a prefix of the text
    std::size_t bytes = 0;
  };
  // The longest key that is a prefix of `text` and ends on a UTF-8 character boundary of it (at
  // its end or before a byte that is not a continuation byte 10xxxxxx), as a search over the
  // text's character prefixes would find.
  Match longest_prefix(std::string_view text) const;

 private:
  struct Node {
    std::uint32_t first_child = 0, end_child = 0;  // children are nodes_[first_child, end_child)
    std::int32_t id = -1;
  };
  std::vector<Node> nodes_;
  std::vector<unsigned char> label_;  // the byte on the edge into node i, sorted among siblings
};

class Vocab {
 public:
  Vocab() = default;
  // `source` names where the tokens came from, for error messages. Throws on duplicate or
  // empty tokens.
  explicit Vocab(std::vector<std::string> tokens, std::string source = "vocabulary");

  // Reads vocab.txt. Throws bertlab::Error naming the file and line on a missing or empty
  // file, an empty line, invalid UTF-8 or a duplicate token.
  static Vocab load(const std::filesystem::path& file);
  // The same from the text of such a file; `file` names it in errors.
  static Vocab parse(std::string_view text, const std::filesystem::path& file);
  // Writes vocab.txt (to a temporary name, then renames).
  void save(const std::filesystem::path& file) const;

  std::size_t size() const { return tokens_.size(); }
  const std::string& token(std::int32_t id) const { return tokens_.at(static_cast<std::size_t>(id)); }
  const std::vector<std::string>& tokens() const { return tokens_; }
  // Id of `token`, or -1.
  std::int32_t find(std::string_view token) const;
  // Id of "##" + piece, or -1 (without building the prefixed string).
  std::int32_t find_continuation(std::string_view piece) const;
  // Id of `token`; throws naming the vocabulary when it is absent.
  std::int32_t require(std::string_view token, std::string_view what) const;
  const std::string& source() const { return source_; }

 private:
  std::vector<std::string> tokens_;
  TokenIdMap ids_;
  TokenIdMap continuation_ids_;  // "##abc" stored as "abc"
  std::string source_;
};

}  // namespace bertlab::data
