// hwmodel/scalesim_memory: SCALE-Sim v2's memory system (InterfaceBandwidth USER) against
// SCALE-Sim itself, run by tests/reference/make_scalesim_fixtures.py.
#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "hwmodel/scalesim_memory.h"
#include "hwmodel/system.h"
#include "test_util.h"

using namespace bertlab;
using namespace bertlab::testing;
using namespace bertlab::hw;

namespace {

// The fixture's dataflow by bertlab's own names of the three (to_string).
Dataflow dataflow_named(const std::string& s) {
  const auto df = enum_parse<Dataflow>(s);
  if (!df) FAIL("unknown dataflow '" << s << "' in a fixture");
  return *df;
}

// Every case of a fixture file, compared exactly: stall and total cycles and the DRAM words.
void check_fixtures(const std::string& file) {
  std::ifstream in(source_dir() / "tests/reference" / file);
  REQUIRE(in.good());
  const auto doc = nlohmann::json::parse(in);
  const bool twice = doc.at("stall_double_count").get<bool>();
  INFO(file << " (SCALE-Sim " << doc.at("scalesim_commit").get<std::string>() << ")");
  REQUIRE(doc.at("cases").size() >= 30);
  int64_t with_stalls = 0;
  for (const auto& c : doc.at("cases")) {
    ScaleSimMemoryDesc mem;
    mem.ifmap_sram_kb = c.at("ifmap_kb");
    mem.filter_sram_kb = c.at("filter_kb");
    mem.ofmap_sram_kb = c.at("ofmap_kb");
    mem.bandwidth_words_per_cycle = c.at("bandwidth");
    mem.stall_double_count = twice;
    const int64_t R = c.at("array");
    const auto r = scalesim_memory_gemm(R, R, c.at("M"), c.at("N"), c.at("K"), dataflow_named(c.at("dataflow")), mem);
    INFO(c.dump());
    CHECK(r.stall_cycles == c.at("stall_cycles").get<int64_t>());
    CHECK(r.total_cycles == c.at("total_cycles").get<int64_t>());
    CHECK(r.dram_ifmap_reads == c.at("dram_ifmap_reads").get<int64_t>());
    CHECK(r.dram_filter_reads == c.at("dram_filter_reads").get<int64_t>());
    CHECK(r.dram_ofmap_writes == c.at("dram_ofmap_writes").get<int64_t>());
    with_stalls += c.at("stall_cycles").get<int64_t>() > 0;
  }
  CHECK(with_stalls >= 10);  // the matrix exercises the stalls, not only stall-free runs
}

}  // namespace

TEST_CASE("SCALE-Sim memory: every fixture case of SCALE-Sim 22f88b17, exactly", "[hwmodel]") {
  check_fixtures("scalesim_fixtures.json");
}

TEST_CASE("SCALE-Sim memory: every fixture case of SCALE-Sim 9b3f10a (stalls counted twice), exactly",
          "[hwmodel]") {
  check_fixtures("scalesim_fixtures_9b3f10a.json");
}

// The anti-diagonal prefetch order in closed form against walking it cell by cell, for
// stacked slices with and without a narrower last slice.
TEST_CASE("SCALE-Sim memory: diagonal prefetch positions against enumeration", "[hwmodel]") {
  for (int64_t groups : {1, 2, 3})
    for (int64_t group_rows : {1, 5, 9})
      for (int64_t width : {1, 4, 7})
        for (int64_t last_width = 1; last_width <= width; ++last_width) {
          const int64_t rows = groups * group_rows;
          int64_t pos = 0, mismatches = 0;
          for (int64_t d = 0; d < rows + width - 1; ++d)
            for (int64_t row = std::min(d, rows - 1); row >= std::max<int64_t>(0, d - width + 1); --row) {
              const int64_t col = d - row;
              if (row >= rows - group_rows && col >= last_width) continue;  // padding: no position
              mismatches += scalesim_diagonal_position(groups, group_rows, width, last_width, row, col) != pos;
              ++pos;
            }
          INFO(groups << " x " << group_rows << " x " << width << " last " << last_width);
          CHECK(mismatches == 0);
          CHECK(pos == (groups - 1) * group_rows * width + group_rows * last_width);
        }
}

// configs/systems/scalesim-32x32.json is SCALE-Sim's configs/scale.cfg (32x32, ws, 64 kB
// SRAMs, 10 words/cycle): on the GEMM of its test topology (M=256 N=128 K=256) it gives what
// SCALE-Sim 22f88b17 prints for that run (the golden test in test_hwmodel.cpp).
TEST_CASE("SCALE-Sim memory: the shipped scale.cfg system gives SCALE-Sim's own run", "[hwmodel]") {
  const SystemDesc s = load_system((source_dir() / "configs/systems/scalesim-32x32.json").string());
  REQUIRE(s.array.compute_model == ComputeModel::scalesim);
  REQUIRE(s.array.scalesim_memory.has_value());
  const auto r = scalesim_memory_gemm(s.array.kernel, s.array.kernel, 256, 128, 256, s.array.dataflow,
                                      *s.array.scalesim_memory);
  CHECK(r.total_cycles == 50519);
  CHECK(r.stall_cycles == 39320);
}
