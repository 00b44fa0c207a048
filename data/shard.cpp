#include "data/shard.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string_view>

#include "base/file_util.h"
#include "data/rng.h"
#include "base/error.h"
#include "base/json_file.h"

namespace bertlab::data {
namespace fs = std::filesystem;
namespace {

// Record layout: u16 num_tokens, u16 len_a, u8 is_random_next, u8 reserved, u16 num_masked,
// i32 tokens[num_tokens], u16 masked_positions[num_masked], i32 masked_labels[num_masked].
constexpr std::size_t kRecordHeaderBytes = 8;
constexpr std::size_t kChecksumOffset = 56;

template <typename T>
void put(std::string& out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.append(buf, sizeof(T));
}

template <typename T>
T get_at(std::string_view bytes, std::size_t pos) {
  T v;
  std::memcpy(&v, bytes.data() + pos, sizeof(T));
  return v;
}

std::size_t record_bytes(const Instance& inst) {
  return kRecordHeaderBytes + 4 * inst.tokens.size() + 6 * inst.masked_positions.size();
}

}  // namespace

std::uint64_t fnv1a64(const void* data, std::size_t size, std::uint64_t hash) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) {
    hash ^= p[i];
    hash *= 0x100000001B3ull;
  }
  return hash;
}

void write_shard(const fs::path& file, const ShardInfo& info, const Instance* instances, std::size_t count) {
  std::string out;
  std::size_t payload = 8 * (count + 1);
  for (std::size_t i = 0; i < count; ++i) payload += record_bytes(instances[i]);
  out.reserve(kShardHeaderBytes + payload);
  out.append(kShardMagic, 8);
  put<std::uint32_t>(out, kShardVersion);
  put<std::uint32_t>(out, kShardHeaderBytes);
  put<std::uint32_t>(out, info.max_seq_length);
  put<std::uint32_t>(out, info.max_predictions);
  put<std::uint32_t>(out, info.vocab_size);
  put<std::uint32_t>(out, info.whole_word_mask ? 1u : 0u);
  put<std::uint64_t>(out, count);
  put<std::uint64_t>(out, payload);
  put<std::uint64_t>(out, info.vocab_checksum);
  put<std::uint64_t>(out, 0);  // checksum, filled below
  std::uint64_t offset = 8 * (count + 1);
  for (std::size_t i = 0; i < count; ++i) {
    put<std::uint64_t>(out, offset);
    offset += record_bytes(instances[i]);
  }
  put<std::uint64_t>(out, offset);
  for (std::size_t i = 0; i < count; ++i) {
    const auto& inst = instances[i];
    check(inst.tokens.size() <= info.max_seq_length && inst.masked_positions.size() <= info.max_predictions &&
              inst.masked_positions.size() == inst.masked_labels.size(),
          "{}: instance {} does not fit the shard limits", file.string(), i);
    put<std::uint16_t>(out, static_cast<std::uint16_t>(inst.tokens.size()));
    put<std::uint16_t>(out, inst.len_a);
    put<std::uint8_t>(out, inst.is_random_next ? 1 : 0);
    put<std::uint8_t>(out, 0);
    put<std::uint16_t>(out, static_cast<std::uint16_t>(inst.masked_positions.size()));
    for (auto t : inst.tokens) put<std::int32_t>(out, t);
    for (auto p : inst.masked_positions) put<std::uint16_t>(out, p);
    for (auto l : inst.masked_labels) put<std::int32_t>(out, l);
  }
  std::uint64_t sum = fnv1a64(out.data(), kChecksumOffset);
  sum = fnv1a64(out.data() + kShardHeaderBytes, out.size() - kShardHeaderBytes, sum);
  std::memcpy(out.data() + kChecksumOffset, &sum, 8);
  write_file_atomic(file, out);
}

namespace {

// Checks the 64-byte header `head` of a shard of `file_size` bytes and returns its fields.
ShardInfo check_header(std::string_view head, std::uint64_t file_size, const std::string& name) {
  check(head.size() >= 8 && std::memcmp(head.data(), kShardMagic, 8) == 0, "{}: not a bertlab shard (bad magic)", name);
  check(head.size() >= kShardHeaderBytes, "{}: not a bertlab shard: {} bytes, shorter than the {}-byte header",
        name, head.size(), kShardHeaderBytes);
  auto version = get_at<std::uint32_t>(head, 8);
  check(version == kShardVersion, "{}: shard version {} is not supported (expected {})", name, version, kShardVersion);
  auto header = get_at<std::uint32_t>(head, 12);
  check(header == kShardHeaderBytes, "{}: field header_bytes is {}, expected {}", name, header, kShardHeaderBytes);
  ShardInfo info;
  info.max_seq_length = get_at<std::uint32_t>(head, 16);
  info.max_predictions = get_at<std::uint32_t>(head, 20);
  info.vocab_size = get_at<std::uint32_t>(head, 24);
  info.whole_word_mask = get_at<std::uint32_t>(head, 28) & 1u;
  info.num_instances = get_at<std::uint64_t>(head, 32);
  const auto payload = get_at<std::uint64_t>(head, 40);
  info.vocab_checksum = get_at<std::uint64_t>(head, 48);
  // Records count tokens and masked positions in 16 bits; a [CLS] A [SEP] B [SEP] needs 3.
  check(info.max_seq_length >= 3 && info.max_seq_length <= 65535,
        "{}: field max_seq_length is {}, expected 3 to 65535", name, info.max_seq_length);
  check(info.max_predictions <= info.max_seq_length,
        "{}: field max_predictions is {}, expected at most max_seq_length ({})", name, info.max_predictions,
        info.max_seq_length);
  check(info.vocab_size >= 1 && info.vocab_size <= static_cast<std::uint32_t>(INT32_MAX),
        "{}: field vocab_size is {}, expected 1 to {}", name, info.vocab_size, INT32_MAX);
  check(payload == file_size - kShardHeaderBytes,
        "{}: truncated or padded: field payload_bytes is {} but the file holds {} bytes after the header",
        name, payload, file_size - kShardHeaderBytes);
  check(info.num_instances < payload / 8, "{}: field num_instances {} does not fit the payload", name,
        info.num_instances);
  return info;
}

}  // namespace

Shard Shard::open(const fs::path& file) {
  const std::string name = file.string();
  // The header is checked before the whole file is read, so that sizes in a foreign or
  // corrupted header cannot make us allocate or loop over what the file does not hold.
  const std::string head = read_file_prefix(file, kShardHeaderBytes);
  if (head.size() < kShardHeaderBytes) check_header(head, head.size(), name);  // throws: too short
  std::error_code ec;
  const std::uintmax_t file_size = fs::file_size(file, ec);
  check(!ec, "{}: cannot read its size: {}", name, ec.message());
  check_header(head, file_size, name);
  std::string bytes = read_file(file);
  check(bytes.size() == file_size, "{}: changed while being read", name);
  return parse(std::move(bytes), file);
}

Shard Shard::parse(std::string bytes, const fs::path& file) {
  Shard s;
  s.path_ = file;
  const std::string name = file.string();
  s.info_ = check_header(std::string_view(bytes).substr(0, kShardHeaderBytes), bytes.size(), name);
  s.bytes_ = std::move(bytes);
  const std::uint64_t n = s.info_.num_instances;
  const auto& b = s.bytes_;
  std::uint64_t sum = fnv1a64(b.data(), kChecksumOffset);
  sum = fnv1a64(b.data() + kShardHeaderBytes, b.size() - kShardHeaderBytes, sum);
  check(sum == get_at<std::uint64_t>(b, kChecksumOffset), "{}: checksum mismatch (the shard is corrupted)", name);
  s.offsets_.resize(n + 1);
  for (std::uint64_t i = 0; i <= n; ++i) s.offsets_[i] = kShardHeaderBytes + get_at<std::uint64_t>(b, kShardHeaderBytes + 8 * i);
  check(s.offsets_[0] == kShardHeaderBytes + 8 * (n + 1) && s.offsets_[n] == b.size(),
        "{}: record offset table does not span the payload", name);
  for (std::uint64_t i = 0; i < n; ++i) {
    auto at = s.offsets_[i], end = s.offsets_[i + 1];
    check(end >= at + kRecordHeaderBytes && end <= b.size(), "{}: record {}: offsets out of order", name, i);
    auto tokens = get_at<std::uint16_t>(b, at), len_a = get_at<std::uint16_t>(b, at + 2),
         masked = get_at<std::uint16_t>(b, at + 6);
    check(end - at == kRecordHeaderBytes + 4u * tokens + 6u * masked, "{}: record {}: size does not match its counts", name, i);
    check(tokens <= s.info_.max_seq_length && masked <= s.info_.max_predictions && len_a + 2u <= tokens,
          "{}: record {}: {} tokens, {} in segment A, {} masked exceed the shard limits", name, i, tokens, len_a, masked);
    // Ids index the embedding table and positions the sequence: both must be in range.
    const std::size_t ids = at + kRecordHeaderBytes, positions = ids + 4u * tokens, labels = positions + 2u * masked;
    for (std::size_t t = 0; t < tokens; ++t) {
      const auto id = get_at<std::int32_t>(b, ids + 4 * t);
      check(id >= 0 && static_cast<std::uint32_t>(id) < s.info_.vocab_size,
            "{}: record {}: field tokens[{}] is {}, expected a token id in [0, vocab_size {})", name, i, t, id,
            s.info_.vocab_size);
    }
    for (std::size_t k = 0; k < masked; ++k) {
      const auto pos = get_at<std::uint16_t>(b, positions + 2 * k);
      check(pos < tokens && (k == 0 || pos > get_at<std::uint16_t>(b, positions + 2 * (k - 1))),
            "{}: record {}: field masked_positions[{}] is {}, expected increasing positions below its {} tokens",
            name, i, k, pos, tokens);
      const auto label = get_at<std::int32_t>(b, labels + 4 * k);
      check(label >= 0 && static_cast<std::uint32_t>(label) < s.info_.vocab_size,
            "{}: record {}: field masked_labels[{}] is {}, expected a token id in [0, vocab_size {})", name, i, k,
            label, s.info_.vocab_size);
    }
  }
  return s;
}

std::uint64_t Shard::checksum() const { return get_at<std::uint64_t>(bytes_, kChecksumOffset); }

Instance Shard::get(std::size_t index) const {
  check(index < size(), "{}: instance {} out of range ({} instances)", path_.string(), index, size());
  std::size_t at = offsets_[index];
  Instance inst;
  auto tokens = get_at<std::uint16_t>(bytes_, at), masked = get_at<std::uint16_t>(bytes_, at + 6);
  inst.len_a = get_at<std::uint16_t>(bytes_, at + 2);
  inst.is_random_next = get_at<std::uint8_t>(bytes_, at + 4) != 0;
  inst.tokens.resize(tokens);
  inst.masked_positions.resize(masked);
  inst.masked_labels.resize(masked);
  at += kRecordHeaderBytes;
  // (no memcpy of 0 bytes: an empty vector's data() may be null, which memcpy does not allow)
  if (tokens > 0) std::memcpy(inst.tokens.data(), bytes_.data() + at, 4u * tokens);
  at += 4u * tokens;
  if (masked > 0) {
    std::memcpy(inst.masked_positions.data(), bytes_.data() + at, 2u * masked);
    at += 2u * masked;
    std::memcpy(inst.masked_labels.data(), bytes_.data() + at, 4u * masked);
  }
  return inst;
}

PretrainingDataset PretrainingDataset::open(const fs::path& dir, const std::string& split, Options options) {
  return PretrainingDataset(dir, split, options);
}

PretrainingDataset::PretrainingDataset(const fs::path& dir, const std::string& split, Options options)
    : PretrainingDataset(dir, read_file(dir / "meta.json"), split, options) {}

PretrainingDataset::PretrainingDataset(const fs::path& dir, std::string_view meta_text, const std::string& split,
                                       Options options)
    : options_(options) {
  const fs::path meta_file = dir / "meta.json";
  const std::string meta_name = meta_file.string();
  const nlohmann::json meta = parse_json_text(meta_text, meta_name);
  fingerprint_ = fnv1a64(meta_text.data(), meta_text.size());
  check(meta.is_object(), "{}: expected a JSON object", meta_name);
  check(meta.contains("format") && meta["format"] == "bertlab-pretraining-data",
        "{}: field 'format' is not \"bertlab-pretraining-data\"", meta_name);
  check(meta.contains(split) && meta[split].is_object() && meta[split].contains("shards"), "{}: no split '{}'",
        meta_name, split);
  const auto& shard_names = meta[split]["shards"];
  check(shard_names.is_array(), "{}: field '{}.shards' must be an array of file names", meta_name, split);
  BertTokenizer tokenizer = BertTokenizer::load(dir);
  for (const auto& name : shard_names) {
    check(name.is_string() && !name.get<std::string>().empty() &&
              fs::path(name.get<std::string>()).filename() == fs::path(name.get<std::string>()),
          "{}: field '{}.shards' holds {}, expected the file name of a shard in {}", meta_name, split,
          name.dump().substr(0, 200), dir.string());
    shards_.push_back(Shard::open(dir / name.get<std::string>()));
    const auto& info = shards_.back().info();
    if (shards_.size() == 1) {
      seq_len_ = info.max_seq_length;
      max_predictions_ = info.max_predictions;
      vocab_size_ = info.vocab_size;
    }
    check(info.max_seq_length == seq_len_ && info.max_predictions == max_predictions_ && info.vocab_size == vocab_size_,
          "{}: shard settings differ from the first shard of split '{}'", shards_.back().path().string(), split);
    check(info.vocab_size == tokenizer.vocab().size(), "{}: shard vocab_size {} but {} has {} tokens",
          shards_.back().path().string(), info.vocab_size, (dir / "vocab.txt").string(), tokenizer.vocab().size());
    starts_.push_back(total_);
    total_ += shards_.back().size();
    const std::uint64_t ids[2] = {info.vocab_checksum, shards_.back().checksum()};
    fingerprint_ = fnv1a64(ids, sizeof ids, fingerprint_);
  }
  const auto field = [&](const char* key, auto fallback, bool (nlohmann::json::*is_type)() const noexcept,
                         const char* expected) {
    if (!meta.contains(key)) return fallback;
    check((meta[key].*is_type)(), "{}: field '{}' is {}, expected {}", meta_name, key, meta[key].dump().substr(0, 200),
          expected);
    return meta[key].get<decltype(fallback)>();
  };
  PrepareOptions o;
  o.masked_lm_prob = field("masked_lm_prob", 0.15, &nlohmann::json::is_number, "a number");
  check(o.masked_lm_prob > 0 && o.masked_lm_prob < 1, "{}: field 'masked_lm_prob' is {}, expected a number in (0, 1)",
        meta_name, o.masked_lm_prob);
  o.max_predictions_per_seq = max_predictions_;
  o.whole_word_mask = field("whole_word_mask", false, &nlohmann::json::is_boolean, "true or false");
  packed_ = field("packed", false, &nlohmann::json::is_boolean, "true or false");
  kinds_ = token_kinds(tokenizer);
  pad_id_ = tokenizer.pad_id();
  spec_ = masking_spec(tokenizer, o, kinds_);
  // mask_tokens predicts round(T x rate) tokens of a T-token sequence, at most max_predictions.
  if (options_.max_masked_lm_prob > 0) {
    check(options_.dynamic_masking, "{}: another masking rate ({}) than the data's needs dynamic masking", dir.string(),
          options_.max_masked_lm_prob);
    check(options_.max_masked_lm_prob < 1, "masking rate {}: expected a fraction in (0, 1)", options_.max_masked_lm_prob);
    const auto needed = static_cast<std::size_t>(std::llround(static_cast<double>(seq_len_) * options_.max_masked_lm_prob));
    max_predictions_ = std::max(max_predictions_, needed);
    spec_.max_predictions = max_predictions_;
  }
}

std::vector<std::size_t> PretrainingDataset::epoch_order(std::size_t epoch) const {
  std::vector<std::size_t> order(total_);
  std::iota(order.begin(), order.end(), std::size_t{0});
  Rng rng(options_.seed, {0xE90C, epoch});
  rng.shuffle(order.begin(), order.end());
  return order;
}

Instance PretrainingDataset::instance(std::size_t index, std::size_t epoch, double masked_lm_prob) const {
  check(index < total_, "instance {} out of range ({} instances)", index, total_);
  auto shard = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), index) - starts_.begin()) - 1;
  Instance inst = shards_[shard].get(index - starts_[shard]);
  if (options_.dynamic_masking) {
    for (std::size_t k = 0; k < inst.masked_positions.size(); ++k)
      inst.tokens[inst.masked_positions[k]] = inst.masked_labels[k];  // restore the original
    Rng rng(options_.seed, {0xD1A5, epoch, index});
    MaskingSpec spec = spec_;
    if (masked_lm_prob > 0) {
      check(masked_lm_prob <= std::max(options_.max_masked_lm_prob, spec_.masked_lm_prob) + 1e-12,
            "masking rate {} is above the {} the data set was opened for", masked_lm_prob,
            std::max(options_.max_masked_lm_prob, spec_.masked_lm_prob));
      spec.masked_lm_prob = masked_lm_prob;
    }
    mask_tokens(inst.tokens, spec, rng, inst.masked_positions, inst.masked_labels);
  } else {
    check(masked_lm_prob == 0, "masking rate {}: the data's static masks cannot be changed without dynamic masking",
          masked_lm_prob);
  }
  return inst;
}

void PretrainingDataset::fill_batch(std::span<const std::size_t> indices, std::size_t epoch, Batch& batch,
                                    double masked_lm_prob) const {
  const std::size_t B = indices.size(), T = seq_len_, P = max_predictions_;
  batch.batch_size = B;
  batch.seq_len = T;
  batch.max_predictions = P;
  batch.input_ids.assign(B * T, pad_id_);
  batch.token_type_ids.assign(B * T, 0);
  batch.attention_mask.assign(B * T, 0);
  batch.masked_lm_positions.assign(B * P, 0);
  batch.masked_lm_ids.assign(B * P, 0);
  batch.masked_lm_weights.assign(B * P, 0.f);
  batch.next_sentence_labels.assign(B, 0);
  for (std::size_t b = 0; b < B; ++b) {
    Instance inst = instance(indices[b], epoch, masked_lm_prob);
    for (std::size_t t = 0; t < inst.tokens.size(); ++t) {
      batch.input_ids[b * T + t] = inst.tokens[t];
      batch.token_type_ids[b * T + t] = t < inst.len_a + 2u ? 0 : 1;
      batch.attention_mask[b * T + t] = 1;
    }
    for (std::size_t k = 0; k < inst.masked_positions.size(); ++k) {
      batch.masked_lm_positions[b * P + k] = inst.masked_positions[k];
      batch.masked_lm_ids[b * P + k] = inst.masked_labels[k];
      batch.masked_lm_weights[b * P + k] = 1.f;
    }
    batch.next_sentence_labels[b] = inst.is_random_next ? 1 : 0;
  }
}

}  // namespace bertlab::data
