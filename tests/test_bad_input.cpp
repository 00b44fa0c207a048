// Bad input never crashes: a malformed config.json, safetensors file or input batch gets a
// bertlab::Error naming the file, tensor or field and what was expected; the CLI prints it and
// exits non-zero without leaving a half-written output behind.
#include <catch2/catch.hpp>

#include "test_util.h"
#include <fmt/core.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ops/peak.h"
#include "runtime/bert_builder.h"
#include "runtime/checkpoint.h"
#include "base/error.h"
#include "runtime/model.h"
#include "runtime/safetensors.h"

using namespace bertlab;
using namespace bertlab::testing;
using Catch::Contains;
namespace fs = std::filesystem;

namespace {

const fs::path kFixture = fs::path(BERTLAB_SOURCE_DIR) / "tests/reference/tiny_bert";


void write_text(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// --- config.json ---------------------------------------------------------------------------

nlohmann::json fixture_config_json() {
  return nlohmann::json::parse(read_text(kFixture / "config.json"));
}

// Writes the fixture config with one field changed and loads it.
BertConfig load_config_with(const TempDir& dir, const std::string& key,
                            const nlohmann::json& value) {
  auto j = fixture_config_json();
  j[key] = value;
  const fs::path file = dir / "config.json";
  write_text(file, j.dump());
  return load_config(file);
}

// --- safetensors ---------------------------------------------------------------------------

// Every tensor of a safetensors file, owned, so variants can be edited and written back.
struct OwnedTensor {
  std::string name, dtype;
  Shape shape;
  std::vector<std::byte> data;
};

std::vector<OwnedTensor> read_all(const fs::path& file) {
  SafetensorsFile f(file);
  std::vector<OwnedTensor> out;
  for (const auto& [name, t] : f.tensors())
    out.push_back({name, t.dtype, t.shape, std::vector<std::byte>(t.data, t.data + t.nbytes)});
  return out;
}

void write_all(const fs::path& file, const std::vector<OwnedTensor>& tensors) {
  std::vector<SafetensorWrite> w;
  for (const auto& t : tensors) w.push_back({t.name, t.dtype, t.shape, t.data.data()});
  write_safetensors(file, w);
}

OwnedTensor& find(std::vector<OwnedTensor>& tensors, const std::string& name) {
  auto it = std::find_if(tensors.begin(), tensors.end(),
                         [&](const OwnedTensor& t) { return t.name == name; });
  REQUIRE(it != tensors.end());
  return *it;
}

// A model directory with the fixture config and the given weights.
void write_model_dir(const fs::path& dir, const std::vector<OwnedTensor>& tensors) {
  fs::create_directories(dir);
  fs::copy_file(kFixture / "config.json", dir / "config.json",
                fs::copy_options::overwrite_existing);
  write_all(dir / "model.safetensors", tensors);
}

// A raw file: 8-byte little-endian header length, then `rest` (header and data).
void write_raw(const fs::path& file, uint64_t header_len, const std::string& rest) {
  std::string blob(8, '\0');
  std::memcpy(blob.data(), &header_len, 8);
  write_text(file, blob + rest);
}

// --- inputs --------------------------------------------------------------------------------

const BertConfig& fixture_config() {
  static const BertConfig c = load_config(kFixture / "config.json");
  return c;
}

// Parses and validates a batch against the fixture config (vocab 211, 2 types, 40 positions).
BertInputs parse_inputs(const std::string& json_text) {
  auto in = inputs_from_json(nlohmann::json::parse(json_text), "in.json");
  validate_inputs(in, fixture_config(), "in.json");
  return in;
}

// --- CLI -----------------------------------------------------------------------------------

struct OutputError {
  std::string name;
  double max_abs = 0, scale = 0;  // max |got - golden|, max |golden|
};

// `bertlab infer` of the fixture model on its input, with `flags`, against the PyTorch golden:
// every output present, F32, and its error.
std::vector<OutputError> infer_against_golden(const std::string& model, const std::string& flags,
                                              const fs::path& out) {
  auto r = run_bertlab(fmt::format("infer --model {} --input {} --output {} {}", model,
                                   quote(kFixture / "input.json"), quote(out), flags));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  SafetensorsFile got(out);
  SafetensorsFile want(kFixture / "expected.safetensors");
  const std::pair<const char*, Shape> outputs[] = {{"last_hidden_state", {3, 13, 48}},
                                                   {"pooler_output", {3, 48}},
                                                   {"mlm_logits", {3, 13, 211}},
                                                   {"nsp_logits", {3, 2}}};
  std::vector<OutputError> errors;
  for (const auto& [name, shape] : outputs) {
    INFO(name);
    REQUIRE(got.contains(name));
    CHECK(got.at(name).dtype == "F32");
    std::vector<float> a(numel(shape)), b(numel(shape));
    got.read_f32(name, shape, a.data());
    want.read_f32(name, shape, b.data());
    OutputError e{name};
    for (size_t i = 0; i < a.size(); ++i) {
      e.max_abs = std::max(e.max_abs, double(std::abs(a[i] - b[i])));
      e.scale = std::max(e.scale, double(std::abs(b[i])));
    }
    errors.push_back(e);
  }
  return errors;
}

}  // namespace

TEST_CASE("Bad config.json: each problem is named with the file and field", "[errors]") {
  TempDir dir;
  const std::string file = (dir / "config.json").string();

  CHECK_THROWS_WITH(load_config_with(dir, "hidden_size", 50),
                    Contains(file) && Contains("hidden_size 50") &&
                        Contains("not divisible by num_attention_heads 3"));
  CHECK_THROWS_WITH(load_config_with(dir, "hidden_size", -48),
                    Contains(file) && Contains("'hidden_size'") &&
                        Contains("must be a positive integer, got -48"));
  CHECK_THROWS_WITH(load_config_with(dir, "num_attention_heads", 0),
                    Contains(file) && Contains("'num_attention_heads'") && Contains("positive"));
  CHECK_THROWS_WITH(load_config_with(dir, "vocab_size", -1),
                    Contains(file) && Contains("'vocab_size'") && Contains("got -1"));
  CHECK_THROWS_WITH(load_config_with(dir, "max_position_embeddings", -512),
                    Contains("'max_position_embeddings'") && Contains("got -512"));
  CHECK_THROWS_WITH(
      load_config_with(dir, "hidden_size", "48"),
      Contains(file) && Contains("'hidden_size'") && Contains("wrong type") && Contains("\"48\""));
  CHECK_THROWS_WITH(load_config_with(dir, "num_hidden_layers", nlohmann::json::array({2})),
                    Contains("'num_hidden_layers'") && Contains("wrong type"));
  // A float or a boolean where an integer belongs is not silently truncated or converted.
  CHECK_THROWS_WITH(load_config_with(dir, "hidden_size", 48.5),
                    Contains(file) && Contains("'hidden_size'") &&
                        Contains("expected an integer") && Contains("48.5"));
  CHECK_THROWS_WITH(load_config_with(dir, "num_attention_heads", true),
                    Contains("'num_attention_heads'") && Contains("expected an integer"));
  CHECK_THROWS_WITH(load_config_with(dir, "layer_norm_eps", "1e-12"),
                    Contains("'layer_norm_eps'") && Contains("wrong type"));
  CHECK_THROWS_WITH(load_config_with(dir, "hidden_act", 3),
                    Contains("'hidden_act'") && Contains("wrong type"));
  CHECK(load_config_with(dir, "hidden_act", "swish").hidden_act == ops::Activation::silu);  // HF's other name
  CHECK_THROWS_WITH(load_config_with(dir, "hidden_act", "gelu_new"),
                    Contains("'hidden_act'") && Contains("gelu_new") && Contains("gelu,"));
  CHECK_THROWS_WITH(load_config_with(dir, "model_type", "gpt2"),
                    Contains("'model_type'") && Contains("expected \"bert\""));
  CHECK_THROWS_WITH(load_config_with(dir, "hidden_dropout_prob", 1.5),
                    Contains("'hidden_dropout_prob'") && Contains("[0, 1)"));
  CHECK_THROWS_WITH(load_config_with(dir, "pad_token_id", 211),
                    Contains("pad_token_id 211") && Contains("[0, 211)"));
  CHECK_THROWS_WITH(load_config_with(dir, "tie_word_embeddings", false),
                    Contains(file) && Contains("'tie_word_embeddings'") && Contains("untied"));
  CHECK(load_config_with(dir, "tie_word_embeddings", true).hidden_size == 48);

  write_text(dir / "config.json", "{ \"hidden_size\": 48, ");
  CHECK_THROWS_WITH(load_config(dir / "config.json"), Contains(file) && Contains("not valid JSON"));
  write_text(dir / "config.json", "[48, 2]");
  CHECK_THROWS_WITH(load_config(dir / "config.json"),
                    Contains(file) && Contains("expected a JSON object"));
  write_text(dir / "config.json", "");
  CHECK_THROWS_WITH(load_config(dir / "config.json"), Contains(file) && Contains("not valid JSON"));
  CHECK_THROWS_WITH(
      load_config(dir / "missing.json"),
      Contains("cannot open config file") && Contains((dir / "missing.json").string()));
  // A directory where a file belongs.
  CHECK_THROWS_WITH(load_config(dir.path()),
                    Contains(dir.path().string()) && Contains("is a directory"));

  // Unknown keys are ignored and the fixture itself loads.
  auto c = load_config_with(dir, "some_future_field", {{"nested", 1}});
  CHECK(c.hidden_size == 48);
  CHECK(c.num_attention_heads == 3);
}

TEST_CASE("Malformed safetensors files are rejected with the file and tensor named", "[errors]") {
  TempDir dir;
  const fs::path file = dir / "bad.safetensors";
  const std::string name = file.string();

  write_text(file, "abc");
  CHECK_THROWS_WITH(SafetensorsFile(file), Contains(name) && Contains("truncated") &&
                                               Contains("3 bytes, expected at least 8"));
  write_text(file, "");
  CHECK_THROWS_WITH(SafetensorsFile(file), Contains(name) && Contains("0 bytes"));
  CHECK_THROWS_WITH(SafetensorsFile(dir / "absent.safetensors"),
                    Contains("cannot open") && Contains("absent.safetensors"));

  write_raw(file, 1000000, "{}");
  CHECK_THROWS_WITH(SafetensorsFile(file), Contains(name) && Contains("header length 1000000") &&
                                               Contains("exceeds the file size 10"));
  write_raw(file, ~uint64_t{0}, "{}");  // a length that would overflow 8 + len
  CHECK_THROWS_WITH(SafetensorsFile(file), Contains(name) && Contains("exceeds the file size"));

  write_raw(file, 9, "{not json");
  CHECK_THROWS_WITH(SafetensorsFile(file), Contains(name) && Contains("header is not valid JSON"));
  write_raw(file, 3, "[1]");
  CHECK_THROWS_WITH(SafetensorsFile(file), Contains(name) && Contains("header must begin with '{'"));

  auto header = [&](const std::string& entry, const std::string& data) {
    const std::string h = "{\"w\": " + entry + "}";
    write_raw(file, h.size(), h + data);
  };
  header(R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})", std::string(4, 'x'));
  CHECK_THROWS_WITH(SafetensorsFile(file), Contains(name) && Contains("tensor 'w'") &&
                                               Contains("data_offsets [0, 8]") &&
                                               Contains("4 data bytes"));
  header(R"({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]})", std::string(8, 'x'));
  CHECK_THROWS_WITH(SafetensorsFile(file), Contains("tensor 'w'") &&
                                               Contains("shape [3] of F32 needs 12 bytes") &&
                                               Contains("give 8"));
  header(R"({"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]})", std::string(8, 'x'));
  CHECK_THROWS_WITH(SafetensorsFile(file),
                    Contains("tensor 'w'") && Contains("unknown dtype 'Q4'"));
  header(R"({"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]})", std::string(8, 'x'));
  CHECK_THROWS_WITH(SafetensorsFile(file),
                    Contains("tensor 'w'") && Contains("negative dimension"));
  header(R"({"dtype": "F32", "shape": [2], "data_offsets": [8, 0]})", std::string(8, 'x'));
  CHECK_THROWS_WITH(SafetensorsFile(file),
                    Contains("tensor 'w'") && Contains("data_offsets [8, 0]"));
  header(R"({"dtype": "F32", "shape": [2], "data_offsets": [0]})", std::string(8, 'x'));
  CHECK_THROWS_WITH(SafetensorsFile(file), Contains("tensor 'w'") && Contains("two entries"));
  header(R"({"shape": [2], "data_offsets": [0, 8]})", std::string(8, 'x'));
  CHECK_THROWS_WITH(SafetensorsFile(file),
                    Contains("tensor 'w'") && Contains("malformed header entry"));
  header(R"(42)", std::string(8, 'x'));
  CHECK_THROWS_WITH(SafetensorsFile(file),
                    Contains("tensor 'w'") && Contains("malformed header entry"));
  header(R"({"dtype": "F32", "shape": "2", "data_offsets": [0, 8]})", std::string(8, 'x'));
  CHECK_THROWS_WITH(SafetensorsFile(file),
                    Contains("tensor 'w'") && Contains("malformed header entry"));
  // Dimensions whose product overflows int64 must not wrap around to a size that "fits".
  header(R"({"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 0]})", "");
  CHECK_THROWS_WITH(SafetensorsFile(file), Contains("tensor 'w'") && Contains("too large"));

  // The fixture with its last bytes cut off: data shorter than the offsets.
  std::string good = read_text(kFixture / "model.safetensors");
  write_text(file, good.substr(0, good.size() - 100));
  CHECK_THROWS_WITH(SafetensorsFile(file),
                    Contains(name) && Contains("beyond the") && Contains("truncated file?"));
  // Cut inside the header.
  write_text(file, good.substr(0, 200));
  CHECK_THROWS_WITH(SafetensorsFile(file), Contains(name) && Contains("exceeds the file size 200"));
}

TEST_CASE("Checkpoints with a wrong dtype, shape or a missing tensor name it", "[errors]") {
  TempDir dir;
  const auto original = read_all(kFixture / "model.safetensors");

  SECTION("wrong dtype") {
    auto t = original;
    find(t, "bert.pooler.dense.bias").dtype = "I32";  // same byte count, wrong type
    write_model_dir(dir.path(), t);
    CHECK_THROWS_WITH(load_model(dir.path(), Heads::pretraining),
                      Contains("model.safetensors") && Contains("'bert.pooler.dense.bias'") &&
                          Contains("dtype I32, expected F32, F16 or BF16"));
  }
  SECTION("wrong shape") {
    auto t = original;
    find(t, "bert.encoder.layer.1.intermediate.dense.weight").shape = {48, 80};
    write_model_dir(dir.path(), t);
    CHECK_THROWS_WITH(load_model(dir.path(), Heads::pretraining),
                      Contains("model.safetensors") &&
                          Contains("'bert.encoder.layer.1.intermediate.dense.weight'") &&
                          Contains("shape [48, 80], expected [80, 48]"));
  }
  SECTION("wrong shape of one part of the fused QKV") {
    auto t = original;
    auto& v = find(t, "bert.encoder.layer.0.attention.self.value.bias");
    v.shape = {40};
    v.data.resize(40 * 4);
    write_model_dir(dir.path(), t);
    CHECK_THROWS_WITH(load_model(dir.path(), Heads::pretraining),
                      Contains("'bert.encoder.layer.0.attention.self.value.bias'") &&
                          Contains("shape [40], expected [48]"));
  }
  SECTION("missing tensor") {
    auto t = original;
    std::erase_if(t, [](const OwnedTensor& x) {
      return x.name == "bert.encoder.layer.1.attention.self.key.weight";
    });
    write_model_dir(dir.path(), t);
    CHECK_THROWS_WITH(load_model(dir.path(), Heads::pretraining),
                      Contains("model.safetensors") && Contains("missing tensor") &&
                          Contains("'bert.encoder.layer.1.attention.self.key.weight'"));
  }
  SECTION("missing non-QKV tensor") {
    auto t = original;
    std::erase_if(t, [](const OwnedTensor& x) { return x.name == "cls.seq_relationship.bias"; });
    write_model_dir(dir.path(), t);
    CHECK_THROWS_WITH(load_model(dir.path(), Heads::pretraining),
                      Contains("missing tensor") && Contains("'cls.seq_relationship.bias'"));
    // Without the pretraining heads the NSP bias is not needed, and is not missed.
    Model m = load_model(dir.path(), Heads::none);
    CHECK(m.from_checkpoint);
  }
  SECTION("stored decoder weight: accepted when tied, refused when it differs") {
    auto t = original;
    OwnedTensor decoder = find(t, "bert.embeddings.word_embeddings.weight");
    decoder.name = "cls.predictions.decoder.weight";
    std::erase_if(t, [](const OwnedTensor& x) { return x.name == "cls.predictions.decoder.weight"; });
    t.push_back(decoder);
    write_model_dir(dir.path(), t);
    CHECK(load_model(dir.path(), Heads::pretraining).from_checkpoint);
    float first;
    std::memcpy(&first, t.back().data.data(), 4);
    first += 1.f;
    std::memcpy(t.back().data.data(), &first, 4);
    write_model_dir(dir.path(), t);
    CHECK_THROWS_WITH(load_model(dir.path(), Heads::pretraining),
                      Contains("model.safetensors") && Contains("'cls.predictions.decoder.weight'") &&
                          Contains("differs from the word embeddings"));
  }
  SECTION("missing model directory and config") {
    CHECK_THROWS_WITH(load_model(dir / "nope", Heads::pretraining), Contains("model directory") &&
                                                                        Contains("nope") &&
                                                                        Contains("does not exist"));
    CHECK_THROWS_WITH(load_model(dir.path(), Heads::pretraining),
                      Contains("cannot open config file") && Contains("config.json"));
  }
}

TEST_CASE("Legacy tensor names load to the same parameters", "[errors]") {
  TempDir dir;
  const auto original = read_all(kFixture / "model.safetensors");
  const Model reference = load_model(kFixture, Heads::pretraining);
  REQUIRE(reference.unused_tensors.empty());

  auto legacy_layernorm = [](std::vector<OwnedTensor> t) {
    for (auto& x : t) {
      for (auto [from, to] :
           {std::pair<std::string, std::string>{"LayerNorm.weight", "LayerNorm.gamma"},
            {"LayerNorm.bias", "LayerNorm.beta"}})
        if (x.name.ends_with(from)) x.name = x.name.substr(0, x.name.size() - from.size()) + to;
    }
    return t;
  };
  auto no_bert_prefix = [](std::vector<OwnedTensor> t) {
    for (auto& x : t)
      if (x.name.starts_with("bert.")) x.name = x.name.substr(5);
    return t;
  };
  auto decoder_bias = [](std::vector<OwnedTensor> t) {
    for (auto& x : t)
      if (x.name == "cls.predictions.bias") x.name = "cls.predictions.decoder.bias";
    return t;
  };
  auto position_ids = [](std::vector<OwnedTensor> t) {
    OwnedTensor p{"bert.embeddings.position_ids", "I64", {1, 40}, std::vector<std::byte>(40 * 8)};
    for (int64_t i = 0; i < 40; ++i) std::memcpy(p.data.data() + 8 * i, &i, 8);
    t.push_back(std::move(p));
    return t;
  };
  auto no_decoder_weight = [](std::vector<OwnedTensor> t) {
    std::erase_if(t,
                  [](const OwnedTensor& x) { return x.name == "cls.predictions.decoder.weight"; });
    return t;
  };

  struct Variant {
    const char* name;
    std::vector<OwnedTensor> tensors;
  };
  const Variant variants[] = {
      {"LayerNorm gamma/beta", legacy_layernorm(original)},
      {"no bert. prefix", no_bert_prefix(original)},
      {"cls.predictions.decoder.bias", decoder_bias(original)},
      {"extra position_ids", position_ids(original)},
      {"no tied decoder weight", no_decoder_weight(original)},
      {"all of the above",
       no_decoder_weight(position_ids(decoder_bias(no_bert_prefix(legacy_layernorm(original)))))},
  };
  for (const auto& v : variants) {
    INFO("variant: " << v.name);
    const fs::path model_dir = dir / "model";
    write_model_dir(model_dir, v.tensors);
    Model m = load_model(model_dir, Heads::pretraining);
    CHECK(m.from_checkpoint);
    CHECK(m.unused_tensors.empty());
    REQUIRE(m.params.arena_size() == reference.params.arena_size());
    CHECK(std::memcmp(m.params.arena(), reference.params.arena(),
                      sizeof(float) * m.params.arena_size()) == 0);
  }

  // An unknown extra tensor is reported as unused, not silently dropped.
  auto extra = original;
  extra.push_back({"bert.something.else", "F32", {2}, std::vector<std::byte>(8)});
  write_model_dir(dir / "model", extra);
  Model m = load_model(dir / "model", Heads::pretraining);
  CHECK(m.unused_tensors == std::vector<std::string>{"bert.something.else"});
}

TEST_CASE("Bad input batches name the field, position and the expected range", "[errors]") {
  const std::string ok = R"({"input_ids": [[2, 5, 3], [2, 7, 0]],
                             "token_type_ids": [[0, 0, 1], [0, 1, 0]],
                             "attention_mask": [[1, 1, 1], [1, 1, 0]]})";
  auto in = parse_inputs(ok);
  CHECK(in.batch == 2);
  CHECK(in.seq == 3);
  // Defaults: types 0, mask 1.
  auto defaults = parse_inputs(R"({"input_ids": [[2, 5, 3]]})");
  CHECK(defaults.token_type_ids == std::vector<int32_t>{0, 0, 0});
  CHECK(defaults.attention_mask == std::vector<int32_t>{1, 1, 1});

  CHECK_THROWS_WITH(parse_inputs(R"({"input_ids": [[2, 211, 3]]})"),
                    Contains("in.json") && Contains("input_ids[0][1] = 211") &&
                        Contains("outside the vocabulary [0, 211)"));
  CHECK_THROWS_WITH(parse_inputs(R"({"input_ids": [[2, 5], [-1, 3]]})"),
                    Contains("input_ids[1][0] = -1") && Contains("[0, 211)"));
  CHECK_THROWS_WITH(parse_inputs(R"({"input_ids": [[2, 5]], "token_type_ids": [[0, 2]]})"),
                    Contains("token_type_ids[0][1] = 2") && Contains("outside [0, 2)"));
  CHECK_THROWS_WITH(parse_inputs(R"({"input_ids": [[2, 5]], "token_type_ids": [[-1, 0]]})"),
                    Contains("token_type_ids[0][0] = -1"));
  CHECK_THROWS_WITH(parse_inputs(R"({"input_ids": [[2, 5]], "attention_mask": [[1, 2]]})"),
                    Contains("attention_mask[0][1] = 2") && Contains("expected 0 or 1"));
  CHECK_THROWS_WITH(parse_inputs(R"({"input_ids": [[2, 5]], "attention_mask": [[-1, 1]]})"),
                    Contains("attention_mask[0][0] = -1"));
  {
    nlohmann::json long_seq = {{"input_ids", {std::vector<int>(41, 5)}}};
    CHECK_THROWS_WITH(parse_inputs(long_seq.dump()),
                      Contains("in.json") && Contains("sequence length 41") &&
                          Contains("exceeds max_position_embeddings 40"));
    nlohmann::json max_seq = {{"input_ids", {std::vector<int>(40, 5)}}};
    CHECK(parse_inputs(max_seq.dump()).seq == 40);
  }
  CHECK_THROWS_WITH(parse_inputs(R"({"input_ids": [[2, 5, 3], [2, 5]]})"),
                    Contains("input_ids[1] has length 2, expected 3"));
  CHECK_THROWS_WITH(parse_inputs(R"({"input_ids": [[2, 5]], "token_type_ids": [[0, 0, 0]]})"),
                    Contains("token_type_ids[0] has length 3, expected 2"));
  CHECK_THROWS_WITH(parse_inputs(R"({"input_ids": [[2, 5], [2, 5]], "attention_mask": [[1, 1]]})"),
                    Contains("'attention_mask' has 1 rows, input_ids has 2"));
  CHECK_THROWS_WITH(parse_inputs(R"({"token_type_ids": [[0, 0]]})"),
                    Contains("in.json") && Contains("missing field 'input_ids'"));
  CHECK_THROWS_WITH(parse_inputs(R"([[2, 5]])"), Contains("in.json") && Contains("JSON object"));
  CHECK_THROWS_WITH(parse_inputs(R"({"input_ids": [[2, 5.5]]})"),
                    Contains("input_ids[0][1] must be an integer, got 5.5"));
  CHECK_THROWS_WITH(parse_inputs(R"({"input_ids": [[2, "5"]]})"),
                    Contains("input_ids[0][1] must be an integer"));
  CHECK_THROWS_WITH(parse_inputs(R"({"input_ids": [[2, true]]})"),
                    Contains("input_ids[0][1] must be an integer, got true"));
  CHECK_THROWS_WITH(parse_inputs(R"({"input_ids": [[2, 5]], "attention_mask": [[1, null]]})"),
                    Contains("attention_mask[0][1] must be an integer, got null"));
  CHECK_THROWS_WITH(parse_inputs(R"({"input_ids": [2, 5]})"),
                    Contains("input_ids[0] must be a list of integers"));
  CHECK_THROWS_WITH(parse_inputs(R"({"input_ids": []})"),
                    Contains("'input_ids' must be a non-empty list of lists"));
  CHECK_THROWS_WITH(parse_inputs(R"({"input_ids": "2 5"})"),
                    Contains("'input_ids' must be a non-empty list of lists"));
  CHECK_THROWS_WITH(parse_inputs(R"({"input_ids": [[]]})"), Contains("input_ids[0] is empty"));
  CHECK_THROWS_WITH(parse_inputs(R"({"input_ids": [[2, 5]], "token_type_ids": null})"),
                    Contains("'token_type_ids' must be a non-empty list of lists"));
  CHECK_THROWS_WITH(parse_inputs(R"({"input_ids": [[2, 4294967301]]})"),
                    Contains("value 4294967301 does not fit int32"));
}

TEST_CASE("bertlab infer and graph fail cleanly on bad files and work on good ones", "[errors]") {
  REQUIRE(fs::exists(BERTLAB_BINARY));
  TempDir dir;
  const fs::path out = dir / "out.safetensors";
  const std::string model = quote(kFixture);
  auto no_leftovers = [&] {
    for (const auto& e : fs::directory_iterator(dir.path()))
      CHECK_FALSE(e.path().filename().string().starts_with("out.safetensors"));
  };

  SECTION("token id outside the vocabulary") {
    write_text(dir / "bad_ids.json", R"({"input_ids": [[2, 500, 3]]})");
    auto r = run_bertlab(fmt::format("infer --model {} --input {} --output {}", model,
                                     quote(dir / "bad_ids.json"), quote(out)));
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("bertlab: error:") && Contains("bad_ids.json") &&
                             Contains("input_ids[0][1] = 500"));
    no_leftovers();
  }
  SECTION("input file that is not JSON") {
    write_text(dir / "broken.json", R"({"input_ids": [[2, 5)");
    auto r = run_bertlab(fmt::format("infer --model {} --input {} --output {}", model,
                                     quote(dir / "broken.json"), quote(out)));
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("bertlab: error:") && Contains("broken.json") &&
                             Contains("not valid JSON"));
    no_leftovers();
  }
  SECTION("missing input file") {
    auto r = run_bertlab(fmt::format("infer --model {} --input {} --output {}", model,
                                     quote(dir / "absent.json"), quote(out)));
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("bertlab: error:") && Contains("absent.json"));
    no_leftovers();
  }
  SECTION("checkpoint missing a tensor") {
    auto t = read_all(kFixture / "model.safetensors");
    std::erase_if(
        t, [](const OwnedTensor& x) { return x.name == "bert.encoder.layer.0.output.dense.bias"; });
    write_model_dir(dir / "model", t);
    auto r =
        run_bertlab(fmt::format("infer --model {} --input {} --output {}", quote(dir / "model"),
                                quote(kFixture / "input.json"), quote(out)));
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("bertlab: error:") && Contains("model.safetensors") &&
                             Contains("'bert.encoder.layer.0.output.dense.bias'"));
    no_leftovers();
  }
  SECTION("graph with a broken config") {
    write_text(dir / "config.json", R"({"hidden_size": 50, "num_attention_heads": 3})");
    auto r = run_bertlab(fmt::format("graph --config {} --batch 1 --seq 4 -o {}",
                                     quote(dir / "config.json"), quote(dir / "graph.json")));
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output,
               Contains("bertlab: error:") && Contains("config.json") && Contains("not divisible"));
    CHECK_FALSE(fs::exists(dir / "graph.json"));
    write_text(dir / "config.json", "hidden_size = 48");
    r = run_bertlab(fmt::format("graph --config {}", quote(dir / "config.json")));
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("bertlab: error:") && Contains("not valid JSON"));
  }
  SECTION("good infer writes every output") {
    for (const auto& e : infer_against_golden(model, "", out)) {
      INFO(e.name << ": max abs error " << e.max_abs);
      CHECK(e.max_abs <= 1e-4);  // the golden tolerance of test_golden_infer.cpp
    }
  }
  SECTION("infer --precision bf16 stays near the PyTorch fp32 golden") {
    if (!ops::cpu_has_bf16()) {
      WARN("skipped: no native bf16 matmul on this CPU");
      return;
    }
    double largest = 0;
    for (const auto& e : infer_against_golden(model, "--precision bf16", out)) {
      INFO(e.name << ": max abs error " << e.max_abs << " of max |value| " << e.scale);
      CHECK(e.max_abs <= 2e-2 * e.scale);  // bf16 inputs to every GEMM: 2^-9 relative rounding each
      largest = std::max(largest, e.max_abs);
    }
    CHECK(largest > 1e-4);  // beyond the fp32 golden tolerance: the GEMMs really ran in bf16
  }
  SECTION("a model too large for memory is an error, not a crash") {
    auto cfg = nlohmann::json::parse(read_text(kFixture / "config.json"));
    cfg["vocab_size"] = int64_t{100'000'000'000};  // 19 TB of word embeddings: beyond the config limits
    write_text(dir / "huge.json", cfg.dump());
    auto r = run_bertlab(fmt::format("init --config {} --out {}", quote(dir / "huge.json"), quote(dir / "huge")));
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("bertlab: error:") && Contains("vocab_size"));
    cfg["vocab_size"] = int64_t{1} << 24;  // within the limits, 3 TB of word embeddings
    cfg["hidden_size"] = 3 << 14;
    write_text(dir / "huge.json", cfg.dump());
    r = run_bertlab(fmt::format("init --config {} --out {}", quote(dir / "huge.json"), quote(dir / "huge")));
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("bertlab: error:") && Contains("out of memory"));
    CHECK_FALSE(fs::exists(dir / "huge" / "model.safetensors"));
  }
  SECTION("graph JSON parses and round-trips") {
    const fs::path graph_file = dir / "graph.json";
    auto r = run_bertlab(fmt::format("graph --config {} --batch 2 --seq 5 -o {}",
                                     quote(kFixture / "config.json"), quote(graph_file)));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    auto j = nlohmann::json::parse(read_text(graph_file));
    Graph g = graph_from_json(j);
    CHECK(graph_to_json(g) == j);
    CHECK(g.tensor(g.tensor_id("input_ids")).shape == Shape{2, 5});
    bool has_mlm = false;
    for (const auto& [name, t] : g.outputs())
      has_mlm |= name == "mlm_logits" && g.tensor(t).shape == Shape{2, 5, 211};
    CHECK(has_mlm);
  }
}

// bertlab estimate: values that used to be accepted (and gave nonsense such as a 5.84x
// "speedup" at 1000 cores or -nan for an empty graph) are errors naming the file and field
// or the flag, with the valid values.
TEST_CASE("bertlab estimate: bad system fields, graphs and flags are named", "[errors][hwmodel]") {
  REQUIRE(fs::exists(BERTLAB_BINARY));
  TempDir dir;
  const fs::path graph = dir / "graph.json";
  REQUIRE(run_bertlab(fmt::format("graph --config {} --batch 1 --seq 8 -o {}",
                                  quote(source_dir() / "configs/bert-tiny.json"), quote(graph)))
              .exit_code == 0);
  const fs::path paper = source_dir() / "configs/systems/paper-ticsat.json";
  const auto system = nlohmann::json::parse(read_text(paper));
  auto estimate = [&](const std::string& args) {
    auto r = run_bertlab("estimate " + args);
    INFO(r.output);
    CHECK(r.exit_code != 0);
    return r.output;
  };
  // A system description with one field changed (what only in_order_core models dropped when
  // the change names another model).
  auto with = [&](const std::string& name, auto&& change) {
    auto j = system;
    change(j);
    if (j["array"]["compute_model"] != "in_order_core") j.erase("operand_offset_bytes"), j.erase("qkv");
    write_text(dir / name, j.dump());
    return estimate(fmt::format("--graph {} --system {}", quote(graph), quote(dir / name)));
  };
  CHECK_THAT(with("cores1000.json", [](auto& j) { j["cores"] = 1000; }),
             Contains("cores1000.json") && Contains("field 'cores' must be in 1..64") && Contains("1000"));
  CHECK_THAT(with("cores25.json", [](auto& j) { j["cores"] = 2.5; }),
             Contains("cores25.json") && Contains("field 'cores' must be a whole number, got 2.5"));
  CHECK_THAT(with("ways.json", [](auto& j) { j["llc"]["ways"] = 8.5; }),
             Contains("field 'llc.ways' must be a whole number"));
  CHECK_THAT(with("kernel.json",
                  [](auto& j) {
                    j["array"]["kernel"] = 4096;
                    j["array"]["compute_model"] = "loosely_coupled";
                  }),
             Contains("kernel.json: field 'array.kernel' is 4096") && Contains("largest K: 512"));
  // The in-order core model has instruction counts of TiC-SAT's kernels at S = 4, 8, 16, 32.
  CHECK_THAT(with("kernel64.json", [](auto& j) { j["array"]["kernel"] = 64; }),
             Contains("kernel64.json: field 'array.kernel' is 64") && Contains("S = 4, 8, 16 and 32 only"));
  CHECK_THAT(with("out.json", [](auto& j) { j["array"]["output_cycles_per_issue"] = -3; }),
             Contains("out.json") && Contains("'array.output_cycles_per_issue' must be in 1e-06..1e+06, got -3"));
  CHECK_THAT(with("issue.json", [](auto& j) { j["array"]["cycles_per_issue"] = 0; }),
             Contains("'array.cycles_per_issue' must be in 1e-06..1e+06, got 0"));
  CHECK_THAT(with("hit.json", [](auto& j) { j["llc"]["hit_cycles"] = -1; }),
             Contains("'llc.hit_cycles' must not be negative"));
  CHECK_THAT(with("row.json", [](auto& j) { j["dram"]["row_bytes"] = 0; }), Contains("'dram.row_bytes'"));
  CHECK_THAT(with("kind.json", [](auto& j) { j["kind"] = "gpu"; }),
             Contains("field 'kind': unknown value 'gpu' (expected one of: accelerator, cpu)"));
  CHECK_THAT(with("model.json", [](auto& j) { j["array"]["compute_model"] = "rtl"; }),
             Contains("field 'array.compute_model': unknown value 'rtl' (expected one of: in_order_core, loosely_coupled, scalesim)"));
  // Misspelt or misplaced fields are refused with the nearest known one, not silently defaulted.
  CHECK_THAT(with("core_count.json", [](auto& j) { j["core_count"] = 4; }),
             Contains("core_count.json: unknown field 'core_count' (did you mean 'cores'?)"));
  CHECK_THAT(with("hashed_idx.json", [](auto& j) { j["llc"]["hashed_idx"] = true; }),
             Contains("unknown field 'llc.hashed_idx' (did you mean 'llc.hashed_index'?)"));
  CHECK_THAT(with("issue_widht.json", [](auto& j) { j["core"]["issue_widht"] = 2; }),
             Contains("unknown field 'core.issue_widht' (did you mean 'core.issue_width'?)"));
  CHECK_THAT(with("precision.json", [](auto& j) { j["precision"] = "bf16"; }),
             Contains("precision.json: field 'precision' belongs to cpu descriptions, and this one is kind 'accelerator'"));
  // Non-finite and absurd values: the field's valid range (products of them overflowed before).
  CHECK_THAT(with("hit308.json", [](auto& j) { j["llc"]["hit_cycles"] = 1e308; }),
             Contains("field 'llc.hit_cycles' must be in 0..1e+06, got 1e+308"));
  CHECK_THAT(with("clock.json", [](auto& j) { j["clock_ghz"] = 1e-300; }),
             Contains("field 'clock_ghz' must be in 0.001..1000, got 1e-300"));
  CHECK_THAT(with("peak.json", [](auto& j) { j["dram"]["peak_gbps"] = 1e-300; }),
             Contains("field 'dram.peak_gbps' must be in 0.001..1e+06, got 1e-300"));
  CHECK_THAT(with("tc.json", [](auto& j) { j["array"]["compute_model"] = "tightly_coupled"; }),
             Contains("tc.json") && Contains("'tightly_coupled' is no longer a model") && Contains("in_order_core") &&
                 Contains("loosely_coupled"));
  // SCALE-Sim's memory system: only in SCALE-Sim mode, every field a positive whole number
  // (or a bool), no unknown fields.
  CHECK_THAT(with("ssmem_tc.json", [](auto& j) { j["array"]["scalesim_memory"] = nlohmann::json::object(); }),
             Contains("ssmem_tc.json") && Contains("field 'array.scalesim_memory'") &&
                 Contains("needs 'array.compute_model' scalesim, got in_order_core"));
  const auto scalesim_memory = [&](const std::string& name, const std::string& key, nlohmann::json value) {
    return with(name, [&](auto& j) {
      j["array"]["compute_model"] = "scalesim";
      j["array"]["scalesim_memory"] = {{"ifmap_sram_kb", 64}, {key, value}};
    });
  };
  CHECK_THAT(scalesim_memory("ssmem_neg.json", "filter_sram_kb", -4),
             Contains("ssmem_neg.json") &&
                 Contains("field 'array.scalesim_memory.filter_sram_kb' must be a whole number of kB in 1..1048576, got -4"));
  CHECK_THAT(scalesim_memory("ssmem_zero.json", "bandwidth_words_per_cycle", 0),
             Contains("field 'array.scalesim_memory.bandwidth_words_per_cycle' must be a whole number of words in "
                      "1..1048576, got 0"));
  CHECK_THAT(scalesim_memory("ssmem_str.json", "ofmap_sram_kb", "big"),
             Contains("field 'array.scalesim_memory.ofmap_sram_kb' must be a whole number, got \"big\""));
  CHECK_THAT(scalesim_memory("ssmem_frac.json", "filter_sram_kb", 1.5),
             Contains("field 'array.scalesim_memory.filter_sram_kb' must be a whole number, got 1.5"));
  CHECK_THAT(scalesim_memory("ssmem_bool.json", "stall_double_count", "yes"),
             Contains("field 'array.scalesim_memory.stall_double_count' has the wrong type"));
  CHECK_THAT(scalesim_memory("ssmem_key.json", "bandwidth", 10),
             Contains("ssmem_key.json") && Contains("unknown field 'array.scalesim_memory.bandwidth'") &&
                 Contains("expected ifmap_sram_kb"));
  CHECK_THAT(with("ssmem_obj.json", [](auto& j) {
               j["array"]["compute_model"] = "scalesim";
               j["array"]["scalesim_memory"] = 64;
             }),
             Contains("field 'array.scalesim_memory' must be an object, got 64"));

  const auto g = nlohmann::json::parse(read_text(graph));
  auto empty = g;
  empty["nodes"] = nlohmann::json::array();
  write_text(dir / "empty.json", empty.dump());
  CHECK_THAT(estimate(fmt::format("--graph {} --system {}", quote(dir / "empty.json"), quote(paper))),
             Contains("empty.json: field 'nodes' is empty") && !Contains("nan"));
  auto run_int4 = g;
  run_int4["meta"]["run"]["precision"] = "int4";
  write_text(dir / "run_int4.json", run_int4.dump());
  CHECK_THAT(estimate(fmt::format("--graph {} --system {}", quote(dir / "run_int4.json"), quote(paper))),
             Contains("run_int4.json") && Contains("field 'meta.run.precision' must be \"fp32\" or \"bf16\", got \"int4\""));
  auto int4 = g;
  for (auto& n : int4["nodes"])
    if (n["op"] == "linear") {
      n["attrs"]["precision"] = "int4";
      break;
    }
  write_text(dir / "int4.json", int4.dump());
  CHECK_THAT(estimate(fmt::format("--graph {} --system {}", quote(dir / "int4.json"), quote(paper))),
             Contains("int4.json") && Contains("attribute 'precision' must be \"fp32\" or \"bf16\", got \"int4\""));

  const std::string base = fmt::format("--graph {} --system {}", quote(graph), quote(paper));
  CHECK_THAT(estimate(base + " --kernel 0"), Contains("--kernel") && Contains("whole numbers in 1..4096") &&
                                                 Contains("got '0'") && !Contains("1.79e308"));
  CHECK_THAT(estimate(base + " --kernel 8,2.5"), Contains("--kernel") && Contains("got '2.5'"));
  CHECK_THAT(estimate(base + " --kernel 1024"), Contains("--kernel is 1024") && Contains("largest K: 512"));
  CHECK_THAT(estimate(base + " --kernel 64"), Contains("field 'array.kernel' is 64") && Contains("S = 4, 8, 16 and 32"));
  CHECK_THAT(estimate(base + " --cores 1000"), Contains("--cores 1000") && Contains("1..64"));
  // The limits are not off by one: the largest kernel and core count accepted (the in-order
  // core model's largest S; any S up to the largest K for the array-only model).
  CHECK(run_bertlab("estimate " + base + " --kernel 32 --cores 64 > /dev/null").exit_code == 0);
  auto loose = nlohmann::json::parse(read_text(paper));
  loose["array"]["compute_model"] = "loosely_coupled";
  loose.erase("operand_offset_bytes"), loose.erase("qkv");
  write_text(dir / "loose.json", loose.dump());
  CHECK(run_bertlab(fmt::format("estimate --graph {} --system {} --kernel 512 --cores 64 > /dev/null", quote(graph),
                                quote(dir / "loose.json")))
            .exit_code == 0);
  // An arrangement the in-order core model has no kernels for is refused before any table is printed.
  CHECK_THAT(estimate(base + " --arrangement tiled"), Contains("not 'tiled'") && !Contains("kernel cores"));
  // --walk: a walk the core model has, and only on a system that walks schedules.
  CHECK_THAT(estimate(base + " --walk fast"), Contains("--walk") && Contains("exact,sampled"));
  CHECK_THAT(estimate(fmt::format("--graph {} --system {} --walk sampled", quote(graph), quote(dir / "loose.json"))),
             Contains("--walk sampled") && Contains("loose.json") && Contains("in_order_core"));
}

TEST_CASE("Numeric flags name the flag and the expectation, not CLI11's full double range", "[errors][cli]") {
  struct Case {
    const char* args;
    const char* expect;
  };
  for (const Case& c : {Case{"train --data d --out o --max-steps 0", "--max-steps: expected a number above 0, got '0'"},
                        Case{"train --data d --out o --lr abc", "--lr: expected a number above 0, got 'abc'"},
                        Case{"train --data d --out o --warmup-steps -1", "--warmup-steps: expected a number of 0 or more"},
                        Case{"train --data d --out o --bucket-mb 0", "--bucket-mb 0: expected a size in MiB above 0"},
                        Case{"train --data d --out o --allreduce-dtype fp16", "--allreduce-dtype: unknown value 'fp16' (expected one of: fp32, bf16)"},
                        Case{"profile --config c --batch 0", "--batch: expected a number above 0, got '0'"}}) {
    auto r = run_bertlab(c.args);
    INFO(c.args << "\n" << r.output);
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.output, Contains(c.expect) && !Contains("1797693134"));
  }
}

TEST_CASE("bench: training flags without --mode train are refused, even at their default value", "[errors][cli]") {
  for (const char* args : {"bench --config bert-tiny --mode infer --optimizer adamw",
                           "bench --config bert-tiny --mode infer --optimizer lamb",
                           "bench --config bert-tiny --optimizer-only",
                           "bench --config bert-tiny --accum-steps 1"}) {
    auto r = run_bertlab(args);
    INFO(args << "\n" << r.output);
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.output,
               Contains("--optimizer, --optimizer-only and --accum-steps need --mode train (got --mode infer)"));
  }
  auto r = run_bertlab("bench --config bert-tiny --mode train --accum-steps 0");
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Contains("--accum-steps") && Contains("not in range"));
}
