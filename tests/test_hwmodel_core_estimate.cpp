// `bertlab estimate` on an in_order_core system against the in-order core model of one
// encoder-layer op (core_model.h, the model checked against valgrind): the same numbers.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "hwmodel/core_model.h"
#include "hwmodel/estimate.h"
#include "runtime/bert_builder.h"
#include "runtime/fusion.h"
#include "test_configs.h"
#include "test_util.h"

using namespace bertlab;
using namespace bertlab::hw;

namespace {

SystemDesc paper(CoreIsa isa, int64_t S, int64_t cores) {
  SystemDesc s = load_system(std::string(BERTLAB_SOURCE_DIR) + "/configs/systems/paper-ticsat.json");
  s.core_isa = isa;
  s.array.kernel = S;
  s.cores = cores;
  return s;
}

}  // namespace

// One encoder layer (hidden 256, 4 heads of 64, ff 1024) at seq 64: each node of the graph
// against the layer ops TiC-SAT runs for it, priced by model_op + op_time with the same
// instruction basis. Differences left: the operands' placement (the estimate's allocator
// against the reference's packing) and the vectors the graph adds (bias, mask, gamma, beta).
TEST_CASE("estimate on an in_order_core system gives the core model's cycles per node", "[hwmodel][core]") {
  Graph g = testing::inference_graph(testing::bert_config(100, 256, 1, 4, 1024, BertConfig{}.max_position_embeddings), 1, 64);
  apply_fusions(g);  // as `bertlab estimate --config` builds it: residual and GELU in the linear's epilogue
  const LayerDims d{64, 256, 4, 64, 1024};
  const std::map<std::string, std::vector<LayerOp>> ops = {
      {"attention.qkv", {LayerOp::qkv}},
      {"attention.scores.convert", {LayerOp::k_transpose}},
      {"attention.scores", {LayerOp::scores}},
      {"attention.softmax", {LayerOp::softmax}},
      {"attention.context", {LayerOp::context}},
      {"attention.output", {LayerOp::attn_out, LayerOp::residual_add}},
      {"attention.layernorm", {LayerOp::layernorm}},
      {"ffn.intermediate", {LayerOp::ffn_in, LayerOp::gelu}},
      {"ffn.output", {LayerOp::ffn_out, LayerOp::residual_add}},
      {"ffn.layernorm", {LayerOp::layernorm}}};
  const CoreIsa isa = GENERATE(CoreIsa::aarch64, CoreIsa::x86_64);
  const int64_t S = GENERATE(4, 32);
  const int64_t P = GENERATE(1, 2);
  const SystemDesc s = paper(isa, S, P);
  for (const Arrangement a : {Arrangement::rwma, Arrangement::bwma}) {
    const GraphEstimate e = estimate_graph(g, s, a);
    int matched = 0;
    for (const auto& n : e.nodes) {
      const std::string prefix = "encoder.0.";
      if (n.name.rfind(prefix, 0) != 0) continue;
      const auto it = ops.find(n.name.substr(prefix.size()));
      if (it == ops.end()) continue;
      double ref = 0, instructions = 0;
      std::string parts;
      for (const LayerOp op : it->second) {
        const OpModel m = model_op(op, a, d, s, builtin_coefficients(isa));
        ref += op_time(m, s).total();
        instructions += *std::max_element(m.instructions.begin(), m.instructions.end());
        parts += fmt::format(" {}: {} instructions {} units {} groups, {:.0f} cycles;", info(op).name, m.instructions[0],
                             m.units[0], m.groups[0], op_time(m, s).total());
      }
      INFO(parts);
      INFO(n.name << " " << to_string(a) << " S " << S << " cores " << P << " isa " << to_string(isa));
      CHECK(n.cycles == Approx(ref).epsilon(0.02));
      // The instructions are the basis's counts of the same work: equal up to rounding.
      CHECK(n.core.instructions == Approx(instructions).epsilon(1e-6));
      ++matched;
    }
    CHECK(matched == 10);
  }
}

// The issue width divides the instruction cycles and nothing else: the same instructions,
// array issues and misses at 1 and 2 per cycle, the node's core time lower by half its
// instruction cycles.
TEST_CASE("in_order_core: core.issue_width divides the instruction cycles", "[hwmodel][core]") {
  const Graph g = testing::inference_graph(testing::bert_config(100, 64, 1, 1, 256, BertConfig{}.max_position_embeddings), 1, 32);
  SystemDesc one = paper(CoreIsa::aarch64, 8, 2), two = one;
  one.issue_width = 1;
  two.issue_width = 2;
  const auto e1 = estimate_graph(g, one, Arrangement::bwma), e2 = estimate_graph(g, two, Arrangement::bwma);
  REQUIRE(e1.nodes.size() == e2.nodes.size());
  for (size_t i = 0; i < e1.nodes.size(); ++i) {
    const auto &x = e1.nodes[i].core, &y = e2.nodes[i].core;
    INFO(e1.nodes[i].name);
    CHECK(y.instructions == x.instructions);
    CHECK(x.issue_cycles == x.instructions);
    CHECK(y.issue_cycles == Approx(x.instructions / 2));
    CHECK(y.array_cycles == x.array_cycles);
    CHECK(y.l1_misses == x.l1_misses);
    CHECK(y.llc_misses == x.llc_misses);
    CHECK(y.total() == Approx(x.total() - x.instructions / 2));
  }
}

// The system file's core fields are checked.
TEST_CASE("in_order_core: core.isa and core.issue_width are validated", "[hwmodel][core][errors]") {
  auto j = system_to_json(paper(CoreIsa::aarch64, 8, 1));
  j["core"]["isa"] = "riscv";
  CHECK_THROWS_WITH(system_from_json(j, "s.json"), Catch::Contains("s.json: field 'core.isa' must be aarch64 or x86_64"));
  j["core"]["isa"] = "x86_64";
  CHECK(system_from_json(j, "s.json").core_isa == CoreIsa::x86_64);
  for (const double w : {0.0, 0.5, 17.0}) {
    j["core"]["issue_width"] = w;
    CHECK_THROWS_WITH(system_from_json(j, "s.json"), Catch::Contains("field 'core.issue_width' must be") &&
                                                         Catch::Contains("1..16"));
  }
}

// The data TLB on hand-computed access patterns (64 entries of 4 KB pages, LRU; a walk is
// walk_levels accesses served by the LLC).
TEST_CASE("in_order_core: the data TLB counts page walks as an LRU TLB does", "[hwmodel][core][tlb]") {
  SystemDesc s = paper(CoreIsa::aarch64, 8, 1);
  s.tlb = {64, 0, 4096, 4};
  // One core walks `rounds` times over `pages` pages, one 4-byte access per page (a stride of
  // one page plus one line, so that consecutive accesses fall in different L1 sets).
  auto walk = [&](const SystemDesc& sys, int64_t pages, int64_t rounds, int64_t stride_pages = 1) {
    CoreSim sim(sys);
    const int op = sim.operand("x");
    int64_t k = 0;
    CoreShare share;
    share.steps = [=](std::vector<CoreSeg>& out) mutable {
      if (k >= pages * rounds) return false;
      out.push_back({op, uint64_t{1} << 30 | static_cast<uint64_t>((k % pages) * stride_pages * 4096 + 64 * (k % 64)), 4,
                     false});
      ++k;
      return true;
    };
    std::vector<CoreShare> shares{share};
    sim.run(shares);
    return sim.tlb_misses()[0];
  };
  CHECK(walk(s, 64, 10) == 64);       // 64 pages fit: the first touch of each misses
  CHECK(walk(s, 65, 10) == 650);      // one page more than entries, cycled: LRU misses every time
  CHECK(walk(s, 1, 1000) == 1);       // one page
  s.tlb.ways = 4;                     // 16 sets of 4: pages 16 apart share a set
  CHECK(walk(s, 4, 10, 16) == 4);     // 4 pages in one set fit
  CHECK(walk(s, 5, 10, 16) == 50);    // 5 do not
  CHECK(walk(s, 64, 10, 1) == 64);    // 64 consecutive pages spread over the sets
  s.tlb.entries = 0;                  // no TLB modelled
  CHECK(walk(s, 65, 10) == 0);
  // A streamed operand misses once per page it spans: 10 pages of a line share.
  s.tlb = {64, 0, 4096, 4};
  {
    CoreSim sim(s);
    std::vector<CoreShare> shares{line_share({{sim.operand("x"), uint64_t{1} << 30, 10 * 4096, false}}, 4, s, 0)};
    sim.run(shares);
    CHECK(sim.tlb_misses()[0] == 10);
  }
  // The walk's cost in the core model's time: misses x walk_levels x llc.hit_cycles.
  OpModel m;
  m.instructions = {0};
  m.issues = {0};
  m.tlb_misses = {1000};
  m.traffic.l1_misses = {0};
  m.traffic.llc_misses = {0};
  CHECK(op_time(m, s).tlb_stall == Approx(1000 * 4 * s.llc.hit_cycles));
}
