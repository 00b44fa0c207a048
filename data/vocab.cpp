#include "data/vocab.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/file_util.h"
#include "data/utf8.h"
#include "base/error.h"
#include "base/json_file.h"

namespace bertlab::data {
namespace {

constexpr std::string_view kContinuation = "##";

void read_token_field(const nlohmann::json& j, const char* key, std::string& out,
                      const std::filesystem::path& file) {
  if (!j.contains(key) || j[key].is_null()) return;
  const auto& v = j[key];
  if (v.is_string()) {
    out = v.get<std::string>();
  } else if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    out = v["content"].get<std::string>();
  } else {
    fail("{}: field '{}' must be a string or an object with a string 'content', got {}",
         file.string(), key, v.dump());
  }
  check(!out.empty(), "{}: field '{}' is empty", file.string(), key);
}

template <typename T>
void read_field(const nlohmann::json& j, const char* key, T& out, const std::filesystem::path& file,
                const char* expected) {
  if (!j.contains(key) || j[key].is_null()) return;
  try {
    out = j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("{}: field '{}' must be {}, got {}", file.string(), key, expected, j[key].dump());
  }
}

}  // namespace

TokenizerConfig TokenizerConfig::load(const std::filesystem::path& file) {
  return parse(read_file(file), file);
}

TokenizerConfig TokenizerConfig::parse(std::string_view text, const std::filesystem::path& file) {
  nlohmann::json j = parse_json_text(text, file.string());
  check(j.is_object(), "{}: expected a JSON object", file.string());
  TokenizerConfig c;
  read_field(j, "do_lower_case", c.do_lower_case, file, "a boolean");
  read_field(j, "tokenize_chinese_chars", c.tokenize_chinese_chars, file, "a boolean");
  if (j.contains("strip_accents") && !j["strip_accents"].is_null()) {
    bool v = false;
    read_field(j, "strip_accents", v, file, "a boolean or null");
    c.strip_accents = v;
  }
  if (j.contains("model_max_length") && j["model_max_length"].is_number()) {
    // Hugging Face writes a huge float (1e30) for "no limit".
    double v = j["model_max_length"].get<double>();
    check(v >= 1, "{}: field 'model_max_length' must be positive, got {}", file.string(), v);
    c.model_max_length = v > 1e9 ? std::size_t{1} << 30 : static_cast<std::size_t>(v);
  } else if (j.contains("model_max_length") && !j["model_max_length"].is_null()) {
    fail("{}: field 'model_max_length' must be a number, got {}", file.string(),
         j["model_max_length"].dump());
  }
  read_token_field(j, "unk_token", c.unk_token, file);
  read_token_field(j, "sep_token", c.sep_token, file);
  read_token_field(j, "pad_token", c.pad_token, file);
  read_token_field(j, "cls_token", c.cls_token, file);
  read_token_field(j, "mask_token", c.mask_token, file);
  return c;
}

void TokenizerConfig::save(const std::filesystem::path& file) const {
  nlohmann::json j;
  j["tokenizer_class"] = "BertTokenizer";
  j["do_lower_case"] = do_lower_case;
  j["strip_accents"] = strip_accents ? nlohmann::json(*strip_accents) : nlohmann::json(nullptr);
  j["tokenize_chinese_chars"] = tokenize_chinese_chars;
  j["model_max_length"] = model_max_length;
  j["unk_token"] = unk_token;
  j["sep_token"] = sep_token;
  j["pad_token"] = pad_token;
  j["cls_token"] = cls_token;
  j["mask_token"] = mask_token;
  write_file_atomic(file, j.dump(2) + "\n");
}

Vocab::Vocab(std::vector<std::string> tokens, std::string source)
    : tokens_(std::move(tokens)), source_(std::move(source)) {
  ids_.reserve(tokens_.size());
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    const std::string& t = tokens_[i];
    check(!t.empty(), "{}: line {}: empty token", source_, i + 1);
    auto [it, inserted] = ids_.emplace(t, static_cast<std::int32_t>(i));
    check(inserted, "{}: line {}: duplicate token '{}' (first on line {})", source_, i + 1, t,
          it->second + 1);
    if (t.size() > kContinuation.size() && t.starts_with(kContinuation))
      continuation_ids_.emplace(t.substr(kContinuation.size()), static_cast<std::int32_t>(i));
  }
}

Vocab Vocab::load(const std::filesystem::path& file) {
  return parse(read_file(file), file);
}

Vocab Vocab::parse(std::string_view text, const std::filesystem::path& file) {
  check(!text.empty(), "{}: vocabulary file is empty", file.string());
  std::vector<std::string> tokens;
  std::size_t line = 0, pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view tok(text.data() + pos, end - pos);
    ++line;
    if (!tok.empty() && tok.back() == '\r') tok.remove_suffix(1);
    auto bad = find_invalid_utf8(tok);
    check(bad == std::string_view::npos, "{}: line {}: invalid UTF-8 at byte {}", file.string(),
          line, bad + 1);
    tokens.emplace_back(tok);
    pos = end + 1;
  }
  return Vocab(std::move(tokens), file.string());
}

void Vocab::save(const std::filesystem::path& file) const {
  std::string out;
  for (const auto& t : tokens_) {
    out += t;
    out += '\n';
  }
  write_file_atomic(file, out);
}

std::int32_t Vocab::find(std::string_view token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

std::int32_t Vocab::find_continuation(std::string_view piece) const {
  auto it = continuation_ids_.find(piece);
  return it == continuation_ids_.end() ? -1 : it->second;
}

std::int32_t Vocab::require(std::string_view token, std::string_view what) const {
  std::int32_t id = find(token);
  check(id >= 0, "{}: the vocabulary lacks the special token '{}' ({})", source_, token, what);
  return id;
}

PieceTrie::PieceTrie(std::vector<Entry> entries) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.key < b.key; });
  std::size_t bytes = 0;
  for (const auto& e : entries) bytes += e.key.size();
  nodes_.reserve(bytes + 1);  // at most one node per key byte, and the root
  label_.reserve(bytes + 1);
  nodes_.push_back({});
  label_.push_back(0);
  // Breadth first over ranges of the sorted keys that share a prefix of `depth` bytes, so that
  // the children of a node are created together and stay contiguous.
  struct Range {
    std::uint32_t node;
    std::size_t lo, hi, depth;
  };
  std::vector<Range> queue{{0, 0, entries.size(), 0}};
  for (std::size_t q = 0; q < queue.size(); ++q) {
    auto [node, lo, hi, depth] = queue[q];
    if (lo < hi && entries[lo].key.size() == depth) nodes_[node].id = entries[lo++].id;  // sorts first
    nodes_[node].first_child = static_cast<std::uint32_t>(nodes_.size());
    while (lo < hi) {
      const char byte = entries[lo].key[depth];
      std::size_t end = lo + 1;
      while (end < hi && entries[end].key[depth] == byte) ++end;
      queue.push_back({static_cast<std::uint32_t>(nodes_.size()), lo, end, depth + 1});
      nodes_.push_back({});
      label_.push_back(static_cast<unsigned char>(byte));
      lo = end;
    }
    nodes_[node].end_child = static_cast<std::uint32_t>(nodes_.size());
  }
}

PieceTrie::Match PieceTrie::longest_prefix(std::string_view text) const {
  Match best;
  if (nodes_.empty()) return best;
  std::uint32_t node = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const auto first = label_.begin() + nodes_[node].first_child, last = label_.begin() + nodes_[node].end_child;
    const auto it = std::lower_bound(first, last, byte);
    if (it == last || *it != byte) break;
    node = static_cast<std::uint32_t>(it - label_.begin());
    const bool boundary = i + 1 == text.size() || (static_cast<unsigned char>(text[i + 1]) & 0xC0) != 0x80;
    if (nodes_[node].id >= 0 && boundary) best = {nodes_[node].id, i + 1};
  }
  return best;
}

}  // namespace bertlab::data
