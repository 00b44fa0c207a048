#include "runtime/checkpoint.h"

#include <algorithm>
#include <optional>
#include <set>

#include "runtime/bert_builder.h"
#include "base/error.h"
#include "base/file_util.h"

namespace bertlab {

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

std::string replace_suffix(const std::string& s, const std::string& from, const std::string& to) {
  if (s.size() < from.size() || s.compare(s.size() - from.size(), from.size(), from) != 0) return s;
  return s.substr(0, s.size() - from.size()) + to;
}

// The names a parameter may carry in a checkpoint, most standard first.
std::vector<std::string> candidate_names(const std::string& name) {
  std::vector<std::string> base{name};
  if (starts_with(name, "bert.")) base.push_back(name.substr(5));
  if (name == "cls.predictions.bias") base.push_back("cls.predictions.decoder.bias");
  std::vector<std::string> out;
  for (const auto& b : base) {
    out.push_back(b);
    std::string legacy = replace_suffix(replace_suffix(b, "LayerNorm.weight", "LayerNorm.gamma"),
                                        "LayerNorm.bias", "LayerNorm.beta");
    if (legacy != b) out.push_back(legacy);
  }
  return out;
}

std::optional<std::string> find_in(const SafetensorsFile& f, const std::vector<std::string>& names) {
  for (const auto& n : names)
    if (f.contains(n)) return n;
  return std::nullopt;
}

// "bert.encoder.layer.3.attention.self.qkv.weight" -> ("bert.encoder.layer.3.attention.self.", "weight")
bool split_qkv(const std::string& name, std::string& prefix, std::string& suffix) {
  auto pos = name.find("attention.self.qkv.");
  if (pos == std::string::npos) return false;
  prefix = name.substr(0, pos) + "attention.self.";
  suffix = name.substr(pos + 19);
  return true;
}

}  // namespace

std::vector<std::string> load_hf_weights(ParamStore& p, const SafetensorsFile& f) {
  std::set<std::string> used;
  for (const auto& info : p.params()) {
    float* dst = p.data(info.name);
    std::string prefix, suffix;
    if (split_qkv(info.name, prefix, suffix)) {
      // Fused QKV: query, key, value stacked along the output dimension.
      const int64_t part = info.shape[0] / 3;
      Shape part_shape = info.shape;
      part_shape[0] = part;
      const int64_t part_numel = numel(part_shape);
      int i = 0;
      for (const char* which : {"query.", "key.", "value."}) {
        std::string hf = prefix + which + suffix;
        auto found = find_in(f, candidate_names(hf));
        check(found.has_value(), "{}: missing tensor '{}'", f.path().string(), hf);
        f.read_f32(*found, part_shape, dst + i++ * part_numel);
        used.insert(*found);
      }
      continue;
    }
    auto found = find_in(f, candidate_names(info.name));
    check(found.has_value(), "{}: missing tensor '{}'", f.path().string(), info.name);
    f.read_f32(*found, info.shape, dst);
    used.insert(*found);
  }
  std::vector<std::string> unused;
  for (const auto& [name, t] : f.tensors()) {
    if (used.count(name)) continue;
    bool expected_extra = name.find("position_ids") != std::string::npos ||
                          name == "cls.predictions.decoder.weight" ||
                          name == "cls.predictions.decoder.bias";
    if (!expected_extra) unused.push_back(name);
  }
  // Older checkpoints store the tied decoder too; it must be the word embeddings.
  const std::string decoder = "cls.predictions.decoder.weight", word = "bert.embeddings.word_embeddings.weight";
  if (f.contains(decoder) && p.contains(word)) {
    const auto& shape = p.info(word).shape;
    std::vector<float> d(static_cast<size_t>(numel(shape)));
    f.read_f32(decoder, shape, d.data());
    check(std::equal(d.begin(), d.end(), p.data(word)),
          "{}: '{}' differs from the word embeddings; bertlab ties the MLM decoder to them as BERT "
          "does (untied decoders are not supported)", f.path().string(), decoder);
  }
  return unused;
}

void save_hf_weights(const std::filesystem::path& file, const ParamStore& p) {
  std::vector<SafetensorWrite> tensors;
  for (const auto& info : p.params()) {
    const float* src = p.data(info.name);
    std::string prefix, suffix;
    if (split_qkv(info.name, prefix, suffix)) {
      Shape part = info.shape;
      part[0] /= 3;
      int i = 0;
      for (const char* which : {"query.", "key.", "value."})
        tensors.push_back({prefix + which + suffix, "F32", part, src + i++ * numel(part)});
      continue;
    }
    tensors.push_back({info.name, "F32", info.shape, src});
  }
  write_safetensors(file, tensors);
}

void save_model_dir(const std::filesystem::path& dir, const BertConfig& c, const ParamStore& p) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  check(!ec, "cannot create model directory {}: {}", dir.string(), ec.message());
  data::write_file_atomic(dir / "config.json", config_to_json(c).dump(2) + "\n");
  save_hf_weights(dir / "model.safetensors", p);
}

}  // namespace bertlab
