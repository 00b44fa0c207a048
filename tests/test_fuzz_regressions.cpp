// The readers' in-memory entry points (what the libFuzzer harnesses of fuzz/ call) against
// their file functions: the same result for valid files and the same error for bad ones. And
// every input the fuzzers found that crashed, hung or ran out of memory, as a regression test.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "base/error.h"
#include "base/file_util.h"
#include "base/json_file.h"
#include "base/json_integer.h"
#include "data/shard.h"
#include "data/task_data.h"
#include "data/tokenizer.h"
#include "runtime/graph.h"
#include "runtime/machine.h"
#include "runtime/safetensors.h"
#include "test_util.h"

using namespace bertlab;
using namespace bertlab::testing;
namespace fs = std::filesystem;

namespace {

void spit(const fs::path& p, std::string_view bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// "ok: <summary>" or "error: <message>".
std::string outcome(const std::function<std::string()>& f) {
  try {
    return "ok: " + f();
  } catch (const Error& e) {
    return std::string("error: ") + e.what();
  }
}

std::string summary(const SafetensorsFile& f) {
  std::string s;
  for (const auto& [name, t] : f.tensors())
    s += fmt::format("{} {} {} {:x};", name, t.dtype, shape_str(t.shape), data::fnv1a64(t.data, t.nbytes));
  return s;
}

std::string summary(const data::Shard& s) {
  std::string out = fmt::format("{} instances, seq {}, vocab {};", s.size(), s.info().max_seq_length, s.info().vocab_size);
  for (size_t i = 0; i < s.size(); ++i) {
    const auto inst = s.get(i);
    out += fmt::format("[{}|{}|{}|{}]", fmt::join(inst.tokens, ","), inst.len_a, fmt::join(inst.masked_positions, ","),
                       fmt::join(inst.masked_labels, ","));
  }
  return out;
}

std::string summary(const std::vector<data::TextExample>& ex) {
  std::string s;
  for (const auto& e : ex) s += fmt::format("{}|{}|{}|{}|{};", e.text, e.has_pair, e.text_pair, e.label, e.source);
  return s;
}

std::string summary(const std::vector<data::TaggedSentence>& sentences) {
  std::string s;
  for (const auto& t : sentences) s += fmt::format("{}|{}|{};", fmt::join(t.words, " "), fmt::join(t.tags, " "), t.source);
  return s;
}

// A shard of two instances over a vocabulary of `vocab` tokens.
std::string shard_bytes(const fs::path& dir, uint32_t vocab) {
  data::ShardInfo info;
  info.max_seq_length = 8;
  info.max_predictions = 2;
  info.vocab_size = vocab;
  info.num_instances = 2;
  std::vector<data::Instance> all(2);
  all[0].tokens = {2, 10, 11, 3, 12, 3};
  all[0].len_a = 2;
  all[0].masked_positions = {1, 4};
  all[0].masked_labels = {20, 21};
  all[1].tokens = {2, 13, 3, 14, 15, 3};
  all[1].len_a = 1;
  all[1].is_random_next = true;
  data::write_shard(dir / "made.shard", info, all.data(), all.size());
  return read_file(dir / "made.shard");
}

}  // namespace

TEST_CASE("In-memory readers give the file readers' results and errors", "[reliability][fuzz]") {
  TempDir dir("inmem");
  // Each case: the file's bytes; the file reader and the in-memory reader must agree.
  auto same = [&](const std::string& name, const std::string& bytes, const std::function<std::string(const fs::path&)>& file,
                  const std::function<std::string(std::string_view, const fs::path&)>& memory) {
    const fs::path f = dir / name;
    spit(f, bytes);
    const std::string a = outcome([&] { return file(f); }), b = outcome([&] { return memory(bytes, f); });
    INFO(name << ": file " << a.substr(0, 300) << "\nmemory " << b.substr(0, 300));
    CHECK(a == b);
    return a;
  };
  int ok = 0, errors = 0;
  auto count = [&](const std::string& o) { (o.rfind("ok: ", 0) == 0 ? ok : errors)++; };

  SECTION("safetensors") {
    const std::string model = read_file(source_dir() / "tests/reference/tiny_bert/model.safetensors");
    std::string flipped = model;
    flipped[3] ^= 0x40;  // the header length
    for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
             {"good.safetensors", model}, {"short.safetensors", model.substr(0, 100)}, {"tiny.safetensors", "abc"},
             {"trailing.safetensors", model + "x"}, {"flipped.safetensors", flipped}})
      count(same(name, bytes, [](const fs::path& f) { return summary(SafetensorsFile(f)); },
                 [](std::string_view b, const fs::path& f) {
                   const auto* p = reinterpret_cast<const std::byte*>(b.data());
                   return summary(SafetensorsFile(std::vector<std::byte>(p, p + b.size()), f));
                 }));
    CHECK(ok == 1);
    CHECK(errors == 4);
  }
  SECTION("shards") {
    const std::string good = shard_bytes(dir.path(), 30);
    std::string bad_sum = good, bad_id = good;
    bad_sum[good.size() - 1] ^= 1;
    bad_id[64 + 8 * 3 + 8] = 40;  // the first token id of record 0, beyond the vocabulary
    uint64_t sum = data::fnv1a64(bad_id.data(), 56);
    sum = data::fnv1a64(bad_id.data() + 64, bad_id.size() - 64, sum);
    std::memcpy(bad_id.data() + 56, &sum, 8);
    for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
             {"good.shard", good}, {"sum.shard", bad_sum}, {"id.shard", bad_id}, {"head.shard", good.substr(0, 40)},
             {"magic.shard", "BLSH"}, {"cut.shard", good.substr(0, good.size() - 4)}})
      count(same(name, bytes, [](const fs::path& f) { return summary(data::Shard::open(f)); },
                 [](std::string_view b, const fs::path& f) { return summary(data::Shard::parse(std::string(b), f)); }));
    CHECK(ok == 1);
    CHECK(errors == 5);
  }
  SECTION("vocab.txt and tokenizer_config.json") {
    for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
             {"good.txt", "[PAD]\n[UNK]\nthe\n##s\r\n"}, {"empty.txt", ""}, {"utf8.txt", "a\n\xff\n"}, {"dup.txt", "a\nb\na\n"}})
      count(same(name, bytes, [](const fs::path& f) { return fmt::format("{}", fmt::join(data::Vocab::load(f).tokens(), " ")); },
                 [](std::string_view b, const fs::path& f) { return fmt::format("{}", fmt::join(data::Vocab::parse(b, f).tokens(), " ")); }));
    auto config = [](const data::TokenizerConfig& c) {
      return fmt::format("{} {} {} {}", c.do_lower_case, c.strips_accents(), c.model_max_length, c.unk_token);
    };
    for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
             {"good.json", R"({"do_lower_case": false, "model_max_length": 1e30, "unk_token": {"content": "<u>"}})"},
             {"type.json", R"({"do_lower_case": 3})"}, {"deep.json", std::string(1000, '[')}, {"list.json", "[1]"}})
      count(same(name, bytes, [&](const fs::path& f) { return config(data::TokenizerConfig::load(f)); },
                 [&](std::string_view b, const fs::path& f) { return config(data::TokenizerConfig::parse(b, f)); }));
    CHECK(ok == 2);
    CHECK(errors == 6);
  }
  SECTION("fine-tuning data") {
    for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
             {"good.csv", "text,label\n\"a, b\",x\nc,y\n"}, {"quote.csv", "text,label\na\"b,x\n"},
             {"good.tsv", "sentence1\tsentence2\tlabel\na\tb\t1\n"}, {"few.tsv", "text\tlabel\nonly\n"},
             {"good.jsonl", "{\"text\": \"a\", \"label\": 1}\n{\"label\": 0, \"text\": \"b\"}\n"},
             {"deep.jsonl", "{\"text\": \"a\", \"label\": " + std::string(5000, '[') + "}\n"}, {"empty.jsonl", "\n"}})
      count(same(name, bytes, [](const fs::path& f) { return summary(data::read_text_examples(f, true)); },
                 [](std::string_view b, const fs::path& f) {
                   return summary(data::parse_text_examples(b, data::table_format_for(f), f, true));
                 }));
    for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
             {"good.conll", "-DOCSTART-\tO\n\nThe\tAT\ndog\tNN\n\nruns\tVBZ\n"}, {"tab.conll", "The AT\n"},
             {"tags.conll", "The\tAT\ndog\n"}})
      count(same(name, bytes, [](const fs::path& f) { return summary(data::read_conll(f, true)); },
                 [](std::string_view b, const fs::path& f) { return summary(data::parse_conll(b, f, true)); }));
    CHECK(ok == 4);
    CHECK(errors == 6);
  }
  SECTION("meta.json of prepared data") {
    fs::copy_file(source_dir() / "tests/data/vocab_small/vocab.txt", dir / "vocab.txt");
    const auto vocab = data::Vocab::load(dir / "vocab.txt").size();
    shard_bytes(dir.path(), static_cast<uint32_t>(vocab));
    auto open = [](const data::PretrainingDataset& d) {
      return fmt::format("{} instances, seq {}, fingerprint {:x}", d.size(), d.seq_len(), d.fingerprint());
    };
    for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
             {"good", R"({"format": "bertlab-pretraining-data", "train": {"shards": ["made.shard"]}})"},
             {"prob", R"({"format": "bertlab-pretraining-data", "train": {"shards": ["made.shard"]}, "masked_lm_prob": 2})"},
             {"path", R"({"format": "bertlab-pretraining-data", "train": {"shards": ["../made.shard"]}})"},
             {"format", R"({"format": "x"})"}}) {
      spit(dir / "meta.json", bytes);
      const std::string a = outcome([&] { return open(data::PretrainingDataset(dir.path(), "train", {})); });
      const std::string b = outcome([&] { return open(data::PretrainingDataset(dir.path(), bytes, "train", {})); });
      INFO(name << ": file " << a << "\nmemory " << b);
      CHECK(a == b);
      count(a);
    }
    CHECK(ok == 1);
    CHECK(errors == 3);
  }
}

TEST_CASE("Inputs the fuzzers found end in a clean error", "[reliability][fuzz]") {
  using Catch::Matchers::Contains;
  TempDir dir("fuzzfound");
  // fuzz_task_data crash-0197f33f: a JSON lines number beyond the range of double threw
  // nlohmann's out_of_range past the reader (std::terminate in the harness, "internal error"
  // from the CLI) instead of an error naming the file and line.
  static const char jsonl[] = "44.44e9999\n\0\tada\x10\x01\n\xa5\x80";
  const std::string input(jsonl, sizeof jsonl - 1);
  CHECK_THROWS_WITH(data::parse_text_examples(input, data::TableFormat::jsonl, dir / "t.jsonl", true),
                    Contains("t.jsonl:1: invalid JSON") && Contains("number overflow"));
  spit(dir / "t.jsonl", input);
  CHECK_THROWS_WITH(data::read_text_examples(dir / "t.jsonl", false), Contains("t.jsonl:1: invalid JSON"));
}

TEST_CASE("machine.json: counts and GEMM sizes past their integer type are named errors", "[reliability][fuzz]") {
  using Catch::Matchers::Contains;
  // fuzz_machine crash-d4c67001: a GEMM's "k" of 2.3e91 (the digits of the found input) reached
  // nlohmann's get<int64_t>, a float-to-integer conversion out of range (undefined behaviour,
  // UBSan); the counts of the file (threads, CPUs, bytes, passes) were cast from double the same way.
  const auto valid = parse_json_text(read_file(source_dir() / "docs/profiling/machine.json"), "machine.json");
  CHECK_NOTHROW(machine_from_json(valid, "m.json"));
  auto j = valid;
  j["gemms"][0]["k"] =
      parse_json_text("23077777777777777777777777777777777777777777777777777777777777777777777777777777777777777774", "k");
  CHECK_THROWS_WITH(machine_from_json(j, "m.json"), Contains("m.json: gemms[0]: field 'k'") && Contains("more than the largest"));
  j = valid;
  j["gemms"][1]["m"] = 9223372036854775808.0;  // 2^63: one past int64_t
  CHECK_THROWS_WITH(machine_from_json(j, "m.json"), Contains("gemms[1]: field 'm'"));
  j["gemms"][1]["m"] = 0;
  CHECK_THROWS_WITH(machine_from_json(j, "m.json"), Contains("gemms[1]: field 'm' must be a positive number"));
  j = valid;
  j["gemms"][1].erase("n");
  CHECK_THROWS_WITH(machine_from_json(j, "m.json"), Contains("gemms[1] has no 'n'"));
  for (const char* count : {"threads", "passes"}) {
    j = valid;
    j[count] = 1e300;
    CHECK_THROWS_WITH(machine_from_json(j, "m.json"), Contains(std::string("field '") + count + "'") && Contains("more than the largest"));
    j[count] = 2147483647.0;  // the largest int still reads
    const MachineInfo m = machine_from_json(j, "m.json");
    CHECK((std::string(count) == "threads" ? m.threads : m.passes) == 2147483647);
  }
  j = valid;
  j["cpu"]["logical_cpus"] = 3e9;
  CHECK_THROWS_WITH(machine_from_json(j, "m.json"), Contains("field 'cpu.logical_cpus' is 3000000000.0"));
  j = valid;
  j["bandwidth_array_bytes"] = 1e19;
  CHECK_THROWS_WITH(machine_from_json(j, "m.json"), Contains("field 'bandwidth_array_bytes'"));
}

TEST_CASE("machine.json: a format or version of another JSON type is a named error", "[reliability][fuzz]") {
  using Catch::Matchers::Contains;
  // fuzz_machine crash-d6fc61e9: "format" was an array (a GEMM list pasted over it). The string
  // default of j.value("format", "") made nlohmann throw type_error past the reader
  // (std::terminate in the harness, "internal error" from the CLI).
  const auto valid = parse_json_text(read_file(source_dir() / "docs/profiling/machine.json"), "machine.json");
  for (const char* bad : {R"([{"batch": 1}])", "7", "null", R"({"format": "bertlab-machine"})"}) {
    auto j = valid;
    j["format"] = parse_json_text(bad, "format");
    INFO(bad);
    CHECK_THROWS_WITH(machine_from_json(j, "m.json"), Contains("m.json: not a bertlab machine description"));
  }
  for (const char* bad : {R"("1")", "[1]", "1.5", "true"}) {
    auto j = valid;
    j["version"] = parse_json_text(bad, "version");
    INFO(bad);
    CHECK_THROWS_WITH(machine_from_json(j, "m.json"), Contains("m.json: machine.json version") && Contains("is not supported"));
  }
}

TEST_CASE("json_integer_in: kind and both bounds, for signed and unsigned JSON integers", "[reliability][fuzz]") {
  // nlohmann stores a non-negative integer literal as unsigned: both bounds must apply to it too.
  const auto j = nlohmann::json::parse(R"([0, 1, 4096, 4097, -1, 18446744073709551615, 4.0, 4e64, "4", true])");
  const std::vector<bool> in_1_4096 = {false, true, true, false, false, false, false, false, false, false};
  for (size_t i = 0; i < j.size(); ++i) {
    INFO(j[i].dump());
    CHECK(json_integer_in(j[i], 1, 4096) == in_1_4096[i]);
  }
  CHECK(json_integer_in(j[4], -1, 0));  // a negative value in a range that holds it
  CHECK_FALSE(json_integer_in(j[1], -5, -1));  // unsigned 1 above a negative range
  CHECK_FALSE(json_integer_in(j[5], 0, std::numeric_limits<int64_t>::max()));  // 2^64-1 past int64
}

TEST_CASE("Safetensors: shape and data_offsets hold JSON integers only", "[reliability][fuzz][safetensors]") {
  using Catch::Matchers::Contains;
  // fuzz_safetensors crash-44b2b83c: a data_offsets entry of 4e64 reached nlohmann's
  // get<uint64_t>, a float-to-integer conversion out of range (undefined behaviour, UBSan).
  // Floats are refused as the format's reference reader refuses them, even 2.0 and 1.5.
  auto file = [](const std::string& entry, size_t data_bytes) {
    const std::string header = R"({"w": )" + entry + "}";
    std::vector<std::byte> bytes(8 + header.size() + data_bytes, std::byte{0});
    const uint64_t n = header.size();
    std::memcpy(bytes.data(), &n, 8);
    std::memcpy(bytes.data() + 8, header.data(), header.size());
    return bytes;
  };
  CHECK_NOTHROW(SafetensorsFile(file(R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})", 8), "ok.safetensors"));
  for (const char* entry : {R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 4e64]})",
                            R"({"dtype": "F32", "shape": [4e64], "data_offsets": [0, 8]})",
                            R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 8.0]})",
                            R"({"dtype": "F32", "shape": [1.5], "data_offsets": [0, 8]})",
                            R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 18446744073709551615]})",
                            R"({"dtype": "F32", "shape": [2], "data_offsets": [0, "8"]})"}) {
    INFO(entry);
    CHECK_THROWS_WITH(SafetensorsFile(file(entry, 8), "bad.safetensors"),
                      Contains("bad.safetensors: tensor 'w'") && Contains("expected an integer"));
  }
  CHECK_THROWS_WITH(SafetensorsFile(file(R"({"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]})", 8), "n.safetensors"),
                    Contains("n.safetensors: tensor 'w': data_offsets [-8, 0] must not be negative"));
  CHECK_THROWS_WITH(SafetensorsFile(file(R"({"dtype": "F32", "shape": {"a": 2}, "data_offsets": [0, 8]})", 8), "o.safetensors"),
                    Contains("malformed header entry: 'shape' must be an array of integers, got object"));
}

// The old search for special tokens (every special searched again from the current position
// after each match): the independent reference for the remembered-positions search.
static std::vector<std::string> tokenize_by_naive_specials(const data::BertTokenizer& tok, std::string_view text,
                                                    const std::vector<std::string>& specials) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t best = std::string_view::npos, best_len = 0;
    for (const auto& s : specials) {
      const auto p = text.find(s, pos);
      if (p < best || (p == best && p != std::string_view::npos && s.size() > best_len)) {
        best = p;
        best_len = s.size();
      }
    }
    for (auto& t : tok.tokenize(text.substr(pos, best == std::string_view::npos ? std::string_view::npos : best - pos)))
      out.push_back(std::move(t));
    if (best == std::string_view::npos) break;
    out.emplace_back(text.substr(best, best_len));
    pos = best + best_len;
  }
  return out;
}

TEST_CASE("Special tokens in the text: the linear search splits as the per-match search did", "[reliability][fuzz][tokenizer]") {
  // fuzz_tokenizer ran at 93 inputs/s: each special token written in the text made the tokenizer
  // search the rest of the text for every special token again (quadratic; a line of 13,000
  // "[SEP]" took 8.6 s in the Release build).
  const auto tok = data::BertTokenizer::load(source_dir() / "tests/data/vocab_small");
  const std::vector<std::string> specials = {"[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]"};
  const std::vector<std::string> pieces = {"[SEP]", "[CLS]", "[MASK]", "[MA", "SK]", "[", "]", "the ", "fox",
                                           " ", "[UNK]", "[PAD]", "[SE", "P]", "Über"};
  std::mt19937 rng(14);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
    INFO(text);
    CHECK(tok.tokenize(text) == tokenize_by_naive_specials(tok, text, specials));
  }
  std::string many;
  for (int i = 0; i < 2000; ++i) many += i % 7 == 6 ? "[CLS] fox" : "[SEP]";
  const auto got = tok.tokenize(many);
  CHECK(got == tokenize_by_naive_specials(tok, many, specials));
  CHECK(std::count(got.begin(), got.end(), "[SEP]") == 2000 - 2000 / 7);
}

TEST_CASE("Graph JSON: integers that are floats, out of range or not numbers are named errors", "[reliability][fuzz][graph]") {
  using Catch::Matchers::Contains;
  // fuzz_graph crash-ccbe1a62: a tensor shape of 2e+119 reached nlohmann's get<int64_t>, a
  // float-to-integer conversion out of range (undefined behaviour, UBSan); ids and node inputs
  // went through get<int> the same way, and a 'format' or 'version' of another JSON type threw
  // nlohmann's type_error past the reader.
  Graph g;
  const int x = g.add_tensor("x", {2, 3}, DType::f32, Role::input);
  g.apply(OpKind::add, "sum", {x, x});
  const nlohmann::json good = graph_to_json(g);
  REQUIRE(graph_to_json(graph_from_json(good)) == good);
  auto with = [&](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json j = good;
    change(j);
    return outcome([&] { return std::to_string(graph_from_json(j).nodes().size()); });
  };
  CHECK_THAT(with([](auto& j) { j["tensors"][0]["shape"][0] = 2e119; }),
             Contains("error: malformed graph JSON: a tensor's 'shape' must be an integer") && Contains("2e+119"));
  CHECK_THAT(with([](auto& j) { j["tensors"][0]["shape"][1] = 3.5; }), Contains("'shape' must be an integer"));
  CHECK_THAT(with([](auto& j) { j["tensors"][0]["shape"][1] = uint64_t{1} << 63; }), Contains("'shape' must be an integer"));
  CHECK_THAT(with([](auto& j) { j["tensors"][0]["shape"] = "2x3"; }), Contains("'shape' must be an array of integers"));
  // Each dimension valid, their product past int64_t (numel() and bytes() would overflow).
  CHECK_THAT(with([](auto& j) { j["tensors"][0]["shape"] = {int64_t{1} << 40, int64_t{1} << 40}; }),
             Contains("tensor 'x': shape [1099511627776, 1099511627776] has more than 2^60 elements"));
  CHECK_THAT(with([](auto& j) { j["tensors"][0]["shape"] = {int64_t{1} << 30, int64_t{1} << 31}; }),
             Contains("has more than 2^60 elements"));
  CHECK_THAT(with([](auto& j) { j["tensors"][0]["id"] = 1e10; }), Contains("a tensor's 'id' must be an integer"));
  CHECK_THAT(with([](auto& j) { j["nodes"][0]["inputs"][0] = int64_t{1} << 40; }),
             Contains("a node's 'inputs' must be an integer in [-2147483648, 2147483647], got 1099511627776"));
  CHECK_THAT(with([](auto& j) { j["nodes"][0]["outputs"][0] = -1e300; }), Contains("a node's 'outputs' must be an integer"));
  CHECK_THAT(with([](auto& j) { j["outputs"]["sum"] = 7e20; }), Contains("an output's tensor id must be an integer"));
  CHECK_THAT(with([](auto& j) { j["version"] = 1e300; }), Contains("'version' must be an integer"));
  CHECK_THAT(with([](auto& j) { j["version"] = "1"; }), Contains("'version' must be an integer"));
  CHECK_THAT(with([](auto& j) { j["format"] = 1; }), Contains("field 'format' must be \"bertlab-graph\""));
}
