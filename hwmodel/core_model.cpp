#include "hwmodel/core_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <future>

#include "hwmodel/latency.h"
#include "hwmodel/tracesim.h"
#include "base/error.h"
#include "base/json_file.h"
#include "base/json_integer.h"

namespace bertlab::hw {

namespace {

// The layer op's operands as views at the reference's placement (encoder_layer.h): RWMA
// row-major with the op's leading dimensions; BWMA panels of S columns ([cols/S][rows][S]),
// weights as S x S tiles ([N/S][K][S]).
MatrixView layer_view(Arrangement arr, uint64_t base, int64_t rows, int64_t cols, int64_t ld, int64_t panel, int64_t S) {
  MatrixView v;
  v.base = base, v.rows = rows, v.cols = cols, v.elem = 1;
  if (!paper_bwma(arr, "the in-order core model")) {
    v.row_stride = ld;
  } else {
    v.row_stride = S, v.panel_width = S, v.panel_stride = panel;
  }
  return v;
}

// Core `core`'s share of op `op` at the reference's placement.
CoreShare layer_share(LayerOp op, Arrangement arr, const LayerDims& d, const SystemDesc& sys, int64_t core,
                      const std::vector<Operand>& ops, const std::vector<int>& ids) {
  const int64_t S = sys.array.kernel, P = sys.cores, s = d.seq, hd = d.head_dim, h = d.hidden;
  const int64_t line = sys.l1.line_bytes;
  // Each operand on its own pages, operand_offset_bytes into the first (TiC-SAT's new[] buffers).
  auto at = [&](int i) { return kRegionBase + static_cast<uint64_t>(ops[i].offset + sys.operand_offset_bytes); };
  if (info(op).gemm) {
    const LayerGemm g = layer_gemm(op, arr, d, S);
    GemmWork w;
    w.arrangement = arr, w.S = S, w.m = g.m, w.k = g.k, w.n = g.n, w.block_rows = sys.rwma_block_rows;
    for (const auto& in : g.instances)
      w.instances.push_back({layer_view(arr, at(in.a) + in.a_off, g.m, g.k, g.lda, g.a_panel, S),
                             layer_view(arr, at(in.b) + in.b_off, g.k, g.n, g.ldb, g.k * S, S),
                             layer_view(arr, at(in.y) + in.y_off, g.m, g.n, g.ldy, g.y_panel, S)});
    const auto& in0 = g.instances.front();
    return gemm_share(w, sys, core, ids[in0.a], ids[in0.b], ids[in0.y]);
  }
  switch (op) {
    case LayerOp::k_transpose: {  // K of each head (s x hd, in qkv) -> K^T (hd x s, the scores' weight)
      std::vector<TransposePair> pairs;
      for (int64_t head = 0; head < d.heads; ++head) {
        const int64_t col = h + head * hd;
        pairs.push_back({layer_view(arr, at(0) + (paper_bwma(arr, "the in-order core model") ? col * s : col), s, hd, 3 * h, s * S, S),
                         layer_view(arr, at(1) + head * hd * s, hd, s, s, hd * S, S)});
      }
      return transpose_share(pairs, S, P, core, ids[0], ids[1]);
    }
    case LayerOp::softmax: {  // per head, rows of the scores in place (exp and sum, then divide)
      std::vector<RowMats> mats;
      for (int64_t head = 0; head < d.heads; ++head) {
        const MatrixView v = layer_view(arr, at(0) + head * s * s, s, s, s, s * S, S);
        mats.push_back({{v}, v});
      }
      return row_share(mats, s, s, 2, true, line, P, core, {ids[0]}, ids[0]);
    }
    case LayerOp::layernorm: {  // rows of attn in place: sum, variance, normalise
      const MatrixView v = layer_view(arr, at(0), s, h, h, s * S, S);
      return row_share({{{v}, v}}, s, h, 3, false, line, P, core, {ids[0]}, ids[0]);
    }
    case LayerOp::residual_add:  // attn += x, in storage order, per 4-byte word
      return line_share({{ids[0], at(0), ops[0].bytes, false}, {ids[1], at(1), ops[0].bytes, true}}, 4, sys, core);
    case LayerOp::gelu:  // a lookup per byte of ff, in place
      return line_share({{ids[0], at(0), ops[0].bytes, true}}, 1, sys, core);
    case LayerOp::qkv:
    case LayerOp::scores:
    case LayerOp::context:
    case LayerOp::attn_out:
    case LayerOp::ffn_in:
    case LayerOp::ffn_out:
      break;
  }
  fail("core model: '{}' is a GEMM", info(op).name);
}


}  // namespace

CoreCoefficients load_coefficients(const std::string& path) { return coefficients_from_json(read_json_file(path), path); }

CoreCoefficients coefficients_from_json(const nlohmann::json& j, const std::string& path) {
  // A json default: a "format" of another JSON type compares unequal (as machine.json's reader).
  check(j.is_object() && j.value("format", nlohmann::json()) == "bertlab-core-coefficients",
        "{}: expected format 'bertlab-core-coefficients'", path);
  check(j.contains("entries") && j.at("entries").is_array(), "{}: field 'entries' must be an array", path);
  CoreCoefficients c;
  const auto& entries = j.at("entries");
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    try {  // a missing field or one of another type: named here, not an internal error
      const Arrangement arr = arrangement_from_string(e.at("arrangement"), fmt::format("{}: entries[{}]: arrangement", path, i));
      check(json_integer_in(e.at("kernel"), 1, 4096), "{}: entries[{}]: kernel must be an integer in [1, 4096], got {}",
            path, i, e.at("kernel").dump());
      c.entries[{layer_op_from_string(e.at("op")), arr,
                 e.at("kernel").get<int64_t>()}] = {e.at("per_unit").get<double>(), e.at("per_group").get<double>()};
    } catch (const nlohmann::json::exception&) {
      fail("{}: entries[{}] must hold op and arrangement (strings), kernel (an integer), per_unit and per_group "
           "(numbers), got {}", path, i, e.dump().substr(0, 120));
    }
  }
  return c;
}

OpModel model_op(LayerOp op, Arrangement a, const LayerDims& d, const SystemDesc& sys_in, const CoreCoefficients& c,
                 const CoreStack& stack) {
  SystemDesc sys = sys_in;
  sys.core_walk = CoreWalk::exact;  // the side tool checked against valgrind walks every tile
  const int64_t P = sys.cores, S = sys.array.kernel;
  check(P >= 1 && (S == 4 || S == 8 || S == 16 || S == 32), "core model: cores {} / kernel {} not supported", P, S);
  check(sys.qkv == QkvSchedule::fused,
        "core model: the encoder layer's ops are the reference kernels' (one fused qkv GEMM); the system's 'qkv' is "
        "per_head, which `bertlab estimate` models: set \"qkv\": \"fused\" here");
  CoreSim sim(sys, stack);
  const auto ops = op_operands(op, d);
  std::vector<int> ids;
  for (const auto& o : ops) ids.push_back(sim.operand(o.name));
  std::vector<CoreShare> work;
  for (int64_t core = 0; core < P; ++core) work.push_back(layer_share(op, a, d, sys, core, ops, ids));
  const std::vector<int64_t> steps = sim.run(work);
  OpModel m;
  m.traffic = sim.finish();
  const auto it = c.entries.find({op, a, S});
  const std::array<double, 2> k = it == c.entries.end() ? std::array<double, 2>{0, 0} : it->second;
  for (int64_t core = 0; core < P; ++core) {
    const CoreShare& w = work[core];
    m.units.push_back(w.units);
    m.groups.push_back(w.groups);
    m.issues.push_back(w.issues);
    m.steps.push_back(steps[core]);
    m.tlb_misses.push_back(sim.tlb_misses()[core]);
    m.instructions.push_back(static_cast<int64_t>(k[0] * w.units + k[1] * w.groups + 0.5));
  }
  return m;
}

OpTime core_time(const std::vector<double>& instructions, const std::vector<int64_t>& issues,
                 const std::vector<int64_t>& tlb_misses, const Traffic& tr, const SystemDesc& sys) {
  OpTime best;
  const double llc_miss = llc_miss_cycles(sys, tr) / sys.memory_parallelism;
  for (size_t c = 0; c < instructions.size(); ++c) {
    OpTime t;
    t.busiest = c;
    t.instructions = instructions[c] / sys.issue_width;                    // in-order, issue_width per cycle
    t.array = issues[c] * sys.array.cycles_per_issue;                       // the array instructions
    t.l1_stall = tr.l1_misses[c] * l1_miss_cycles(sys);                    // L1 miss served by the LLC
    t.llc_stall = tr.llc_misses[c] * llc_miss;                              // LLC miss served by DRAM
    t.tlb_stall = tlb_misses[c] * tlb_walk_cycles(sys);                     // page walk through the LLC
    if (c == 0 || t.core() > best.core()) best = t;
  }
  best.dram = tr.dram_bytes() / sys.dram_bytes_per_cycle();  // shared DRAM bandwidth floor
  return best;
}

OpTime op_time(const OpModel& m, const SystemDesc& sys) {
  return core_time(std::vector<double>(m.instructions.begin(), m.instructions.end()), m.issues, m.tlb_misses, m.traffic,
                   sys);
}

std::string paper_table_markdown(const LayerDims& d, const SystemDesc& sys0, const CoreCoefficients& c) {
  struct Region {
    OpTime sum;       // components of the busiest cores, summed over the region's ops
    double time = 0;  // sum of the ops' times (each the larger of core time and DRAM floor)
    int64_t bytes = 0;
  };
  std::string summary =
      "| S | cores | speedup attention | speedup FFN | speedup layer | DRAM bytes RWMA | DRAM bytes BWMA |\n"
      "|---|---|---|---|---|---|---|\n";
  std::string detail =
      "| S | cores | region | arrangement | instructions | array | L1-miss stalls | LLC-miss stalls | "
      "DRAM floor | time | DRAM bytes |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  using Regions = std::array<std::array<Region, 2>, 2>;  // [the paper's arrangement: rwma, bwma][attention, ffn]
  auto one = [&](int64_t S, int64_t P) {
    SystemDesc sys = sys0;
    sys.cores = P;
    sys.array.kernel = S;
    Regions r{};
    for (size_t ai = 0; ai < kPaperArrangements.size(); ++ai)
      for (const auto& e : kLayerOpTable) {
        const Arrangement a = kPaperArrangements[ai];
        const OpModel m = model_op(e.op, a, d, sys, c);
        const OpTime t = op_time(m, sys);
        const bool attention = e.region == LayerRegion::attention;
        for (int region = 0; region < 2; ++region) {
          // Ops that run twice (residual add, layernorm) run once after each sub-layer.
          if (e.per_layer == 1 && region != (attention ? 0 : 1)) continue;
          Region& x = r[ai][region];
          x.sum.instructions += t.instructions, x.sum.array += t.array;
          x.sum.l1_stall += t.l1_stall, x.sum.llc_stall += t.llc_stall, x.sum.dram += t.dram;
          x.time += t.total();
          x.bytes += m.traffic.dram_bytes();
        }
      }
    return r;
  };
  // Two configurations at a time (the simulations are independent).
  std::vector<std::pair<int64_t, int64_t>> configs;
  for (const int64_t S : {4, 8, 16, 32})
    for (const int64_t P : {1, 2, 4}) configs.emplace_back(S, P);
  std::vector<Regions> results(configs.size());
  for (size_t i = 0; i < configs.size(); i += 2) {
    auto second = i + 1 < configs.size()
                      ? std::async(std::launch::async, one, configs[i + 1].first, configs[i + 1].second)
                      : std::future<Regions>{};
    results[i] = one(configs[i].first, configs[i].second);
    if (second.valid()) results[i + 1] = second.get();
  }
  for (size_t i = 0; i < configs.size(); ++i) {
    const auto [S, P] = configs[i];
    const Regions& r = results[i];
    {
      auto layer = [&](int a) { return r[a][0].time + r[a][1].time; };
      auto bytes = [&](int a) { return r[a][0].bytes + r[a][1].bytes; };
      summary += fmt::format("| {} | {} | {:.2f}x | {:.2f}x | {:.2f}x | {} | {} |\n", S, P, r[0][0].time / r[1][0].time,
                             r[0][1].time / r[1][1].time, layer(0) / layer(1), bytes(0), bytes(1));
      for (int region = 0; region < 2; ++region)
        for (int a = 0; a < 2; ++a) {
          const Region& x = r[a][region];
          detail += fmt::format("| {} | {} | {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {} |\n", S, P,
                                region == 0 ? "attention" : "FFN", a == 0 ? "RWMA" : "BWMA", x.sum.instructions / 1e6,
                                x.sum.array / 1e6, x.sum.l1_stall / 1e6, x.sum.llc_stall / 1e6, x.sum.dram / 1e6,
                                x.time / 1e6, x.bytes);
        }
    }
  }
  return "### Layer speedup (BWMA over RWMA) and DRAM bytes\n\n" + summary +
         "\n### Time per region, in millions of cycles of the busiest core (summed over the region's ops)\n\n" + detail;
}

}  // namespace bertlab::hw
