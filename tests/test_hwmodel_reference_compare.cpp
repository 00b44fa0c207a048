// scripts/hwmodel_reference.py compare (docs/hwmodel-reference.md) on a hand-made data
// directory, with a stand-in for `bertlab_hwref model` that logs its arguments and answers by
// them (a modulo-indexed LLC gives other LLC misses and DRAM bytes than the hashed one): which
// model runs compare makes, under which models.json keys, and which reference count each cell
// holds. At 1 core: cachegrind's LL against the modulo model; the 1-core replay's DRAM bytes
// and LLC misses against the model on the hashed LLC, cached under its own key.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

using namespace bertlab::testing;

namespace {

void write(const fs::path& p, const std::string& text) {
  std::ofstream f(p);
  f << text;
}

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The stand-in model: per core 1000 / P instructions and 50 / P L1 misses; LLC misses 10 / P
// per core with --modulo, 20 / P without; DRAM bytes 640 with --modulo, 1280 without. Each call's
// arguments go to calls.log beside it.
constexpr const char* kFakeModel = R"(#!/usr/bin/python3
import json, os, sys
a = sys.argv[1:]
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.log"), "a") as f:
    f.write(" ".join(a) + "\n")
P = int(a[a.index("--cores") + 1])
mod = "--modulo" in a
print(json.dumps({"instructions": [1000 // P] * P, "l1_misses": [50 // P] * P,
                  "llc_misses": [(10 if mod else 20) // P] * P, "dram_bytes": 640 if mod else 1280}))
)";

// Reference counts: qkv RWMA with cachegrind and replays at 1 and 2 cores; GELU RWMA with
// cachegrind at 1 core only (no replay: its DRAM cell stays unmeasured, no hashed model run).
void write_dir(const fs::path& dir) {
  write(dir / "cachegrind.txt",
        "qkv rwma 64 4 1 0 1000 50 11\n"
        "qkv rwma 64 4 2 0 500 25 6\n"
        "qkv rwma 64 4 2 1 500 25 6\n"
        "gelu rwma 64 4 1 0 990 52 10\n");
  auto rp = [](int P, int64_t dram, const std::vector<int>& llc) {
    return fmt::format("qkv rwma 64 4 {} {}\n", P,
                       nlohmann::json{{"dram_bytes", dram},
                                      {"instructions", std::vector<int>(P, 1000 / P)},
                                      {"l1_misses", std::vector<int>(P, 50 / P)},
                                      {"llc_misses", llc}}
                           .dump());
  };
  write(dir / "replay.txt", rp(1, 1300, {19}) + rp(2, 1290, {10, 11}));
  write(dir / "model.py", kFakeModel);
  fs::permissions(dir / "model.py", fs::perms::owner_all);
}

std::string compare_cmd(const TempDir& dir) {
  return fmt::format("/usr/bin/python3 {} compare {} {} system.json coeffs.json",
                     quote(source_dir() / "scripts/hwmodel_reference.py"), quote(dir.path()), quote(dir / "model.py"));
}

std::string pct(double model, double ref) { return fmt::format("{:.1f}%", 100.0 * (model - ref) / ref); }

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream s(text);
  for (std::string l; std::getline(s, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

int count(const std::vector<std::string>& ls, const std::string& what) {
  int n = 0;
  for (const auto& l : ls) n += l.find(what) != std::string::npos;
  return n;
}

}  // namespace

TEST_CASE("reference compare: 1-core DRAM bytes and LLC misses of the replay against the hashed model",
          "[hwmodel-reference]") {
  TempDir dir("reference_compare");
  write_dir(dir.path());
  const auto r = run_shell(compare_cmd(dir));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);

  // Model runs: one per key, and a second (hashed LLC, no --modulo) for the 1-core key with a replay.
  const auto calls = lines(read(dir / "calls.log"));
  CHECK(calls.size() == 4);
  CHECK(count(calls, "--op qkv --arrangement rwma --seq 64 --kernel 4 --cores 1 ") == 2);
  CHECK(count(calls, "--op qkv --arrangement rwma --seq 64 --kernel 4 --cores 1 --system system.json "
                     "--coefficients coeffs.json --modulo") == 1);
  CHECK(count(calls, "--cores 2 --system system.json --coefficients coeffs.json --modulo") == 0);
  CHECK(count(calls, "--op gelu --arrangement rwma --seq 64 --kernel 4 --cores 1 --system system.json "
                     "--coefficients coeffs.json --modulo") == 1);

  // The cache: the modulo run under the plain 1-core key, the hashed one under its own.
  auto cache = nlohmann::json::parse(read(dir / "models.json"));
  CHECK(cache.size() == 5);  // the four runs and the fingerprint of the model they were made with
  CHECK(cache.at("fingerprint").is_string());
  CHECK(cache.at("qkv rwma 64 4 1")["dram_bytes"] == 640);
  CHECK(cache.at("qkv rwma 64 4 1 hashed")["dram_bytes"] == 1280);
  CHECK(cache.at("qkv rwma 64 4 2")["dram_bytes"] == 1280);
  CHECK(cache.at("gelu rwma 64 4 1")["dram_bytes"] == 640);
  CHECK_FALSE(cache.contains("gelu rwma 64 4 1 hashed"));

  // Rows: at 1 core cachegrind's LL (11) against the modulo model (10), the replay's DRAM bytes
  // (1300) against the hashed model (1280); at 2 cores the replay's LLC misses and DRAM bytes.
  const auto out = lines(r.output);
  CHECK(count(out, fmt::format("| qkv | rwma | 64 | 4 | 1 | 1000 | 1000 | 0.0% | 50 | 50 | 0.0% | 11 | 10 | {} | "
                               "1300 | 1280 | {} |",
                               pct(10, 11), pct(1280, 1300))) == 1);
  CHECK(count(out, fmt::format("| qkv | rwma | 64 | 4 | 2 | 1000 | 1000 | 0.0% | 50 | 50 | 0.0% | 21 | 20 | {} | "
                               "1290 | 1280 | {} |",
                               pct(20, 21), pct(1280, 1290))) == 1);
  CHECK(count(out, fmt::format("| gelu | rwma | 64 | 4 | 1 | 990 | 1000 | {} | 52 | 50 | {} | 10 | 10 | 0.0% | "
                               "- | 640 | - |",
                               pct(1000, 990), pct(50, 52))) == 1);
  // The 1-core replay's LLC misses (19) against the hashed model (20), cachegrind's beside them.
  CHECK(count(out, fmt::format("| qkv | rwma | 64 | 4 | 19 | 20 | {} | 11 | 10 |", pct(20, 19))) == 1);
  // Summary: DRAM at both core counts within 5%; the hashed 1-core LLC row outside (5.3%);
  // cachegrind's 1-core LLC row (-9.1%) the worst LLC row.
  CHECK(count(out, fmt::format("- seq 64, DRAM: 2 of 2 within 5%; worst {} (qkv rwma seq 64 S 4 cores 1)",
                               pct(1280, 1300))) == 1);
  CHECK(count(out, fmt::format("- seq 64, LLC at 1 core, replay (hashed LLC): 0 of 1 within 5%; worst {} "
                               "(qkv rwma seq 64 S 4 cores 1)",
                               pct(20, 19))) == 1);
  CHECK(count(out, fmt::format("- seq 64, LLC: 2 of 3 within 5%; worst {} (qkv rwma seq 64 S 4 cores 1)",
                               pct(10, 11))) == 1);

  // A second compare reruns nothing (every key cached) and prints the same.
  const auto again = run_shell(compare_cmd(dir));
  REQUIRE(again.exit_code == 0);
  CHECK(lines(read(dir / "calls.log")).size() == 4);
  CHECK(again.output == r.output);

  // A cache made by another version of the model (another fingerprint) is dropped: every run
  // is made again, and compare says why.
  cache["fingerprint"] = "0123456789abcdef";
  write(dir / "models.json", cache.dump());
  const auto stale = run_shell(compare_cmd(dir));
  INFO(stale.output);
  REQUIRE(stale.exit_code == 0);
  CHECK(lines(read(dir / "calls.log")).size() == 8);
  CHECK_THAT(stale.output, Catch::Contains("made by another version of the model or other inputs (fingerprint "
                                           "0123456789abcdef"));
  CHECK(nlohmann::json::parse(read(dir / "models.json")).at("fingerprint") != "0123456789abcdef");
}
