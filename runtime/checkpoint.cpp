#include "runtime/checkpoint.h"

#include <openssl/evp.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <optional>
#include <set>

#include "runtime/bert_builder.h"
#include "base/error.h"
#include "base/file_util.h"
#include "base/json_file.h"

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
  write_file_atomic(dir / "config.json", config_to_json(c).dump(2) + "\n");
  save_hf_weights(dir / "model.safetensors", p);
}

}  // namespace bertlab

namespace bertlab {

namespace fs = std::filesystem;

std::string sha256_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  check(in.good(), "{}: cannot open for reading", file.string());
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  check(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1, "SHA-256 is not available (OpenSSL)");
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  check(!in.bad(), "{}: read error", file.string());
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &len);
  std::string hex;
  for (unsigned i = 0; i < len; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

void write_manifest(const fs::path& dir) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || name == kManifestFile || name.front() == '.') continue;
    files[name] = {{"bytes", fs::file_size(e.path())}, {"sha256", sha256_file(e.path())}};
  }
  nlohmann::json manifest{{"format", "bertlab-checkpoint-manifest"}, {"version", 1}, {"files", files}};
  write_file_atomic(dir / kManifestFile, manifest.dump(2) + "\n");
}

namespace {

// The reason `dir` does not verify, or "" when it does.
std::string manifest_problem(const fs::path& dir) {
  const fs::path file = dir / kManifestFile;
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return fmt::format("{} is missing (the checkpoint is incomplete)", file.string());
  nlohmann::json manifest;
  try {
    manifest = read_json_file(file, "checkpoint manifest");
  } catch (const Error& e) {
    return e.what();
  }
  if (!manifest.is_object() || manifest.value("format", nlohmann::json()) != "bertlab-checkpoint-manifest" ||
      !manifest.contains("files") || !manifest["files"].is_object())
    return fmt::format("{}: not a bertlab checkpoint manifest (field 'format' or 'files' is wrong)", file.string());
  for (const char* required : {"config.json", "model.safetensors", "optimizer.safetensors", "trainer_state.json"})
    if (!manifest["files"].contains(required))
      return fmt::format("{}: field 'files' does not list {}", file.string(), required);
  for (auto it = manifest["files"].begin(); it != manifest["files"].end(); ++it) {
    const fs::path f = dir / it.key();
    const auto& entry = it.value();
    if (!entry.is_object() || !entry.contains("bytes") || !entry["bytes"].is_number_unsigned() ||
        !entry.contains("sha256") || !entry["sha256"].is_string() || fs::path(it.key()).filename() != it.key())
      return fmt::format("{}: field 'files.{}' is malformed", file.string(), it.key());
    if (!fs::is_regular_file(f, ec)) return fmt::format("checkpoint {} is incomplete: {} is missing", dir.string(), it.key());
    const auto size = fs::file_size(f, ec);
    const auto want = entry["bytes"].get<std::uintmax_t>();
    if (ec || size != want)
      return fmt::format("{}: {} bytes, the manifest says {} ({})", f.string(), size, want,
                         size < want ? "truncated" : "the file was changed");
    if (sha256_file(f) != entry["sha256"].get<std::string>())
      return fmt::format("{}: SHA-256 differs from the manifest (the file is corrupted or was edited)", f.string());
  }
  return "";
}

}  // namespace

std::vector<fs::path> checkpoints_in(const fs::path& out) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  if (fs::is_directory(out, ec))
    for (const auto& e : fs::directory_iterator(out, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("checkpoint-", 0) != 0 || !e.is_directory(ec)) continue;
      int64_t step = 0;
      const char* first = name.data() + 11;
      const char* last = name.data() + name.size();
      auto [end, err] = std::from_chars(first, last, step);
      if (err == std::errc() && end == last && first != last && step >= 0) found.emplace_back(step, e.path());
    }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> paths;
  for (auto& f : found) paths.push_back(f.second);
  return paths;
}

fs::path newest_valid_checkpoint(const fs::path& out) {
  auto all = checkpoints_in(out);
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if (manifest_problem(*it).empty()) return *it;
  return {};
}

fs::path resume_dir(const fs::path& resume, const fs::path& out) {
  if (resume != "latest") return resume;
  fs::path newest = newest_valid_checkpoint(out);
  check(!newest.empty(), "--resume latest: {} holds no complete checkpoint", out.string());
  return newest;
}

void verify_manifest(const fs::path& dir) {
  std::error_code ec;
  check(fs::is_directory(dir, ec), "checkpoint {} does not exist", dir.string());
  const std::string problem = manifest_problem(dir);
  if (problem.empty()) return;
  const fs::path parent = fs::absolute(dir, ec).lexically_normal().parent_path();
  const fs::path newest = newest_valid_checkpoint(parent);
  fail("cannot resume from {}: {}; {}", dir.string(), problem,
       newest.empty() ? fmt::format("{} holds no valid checkpoint", parent.string())
                      : fmt::format("the newest valid checkpoint is {}", newest.string()));
}

}  // namespace bertlab
