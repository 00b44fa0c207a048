#include "hwmodel/core_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <future>

#include "hwmodel/tracesim.h"
#include "base/error.h"
#include "base/json_file.h"
#include "base/json_integer.h"

namespace bertlab::hw {

namespace {

// One access of a schedule step: `bytes` at `addr` of operand `op`; write = read-modify-write
// (the kernels add into their outputs and rewrite in-place operands).
struct Seg {
  int op;
  uint64_t addr;
  int64_t bytes;
  bool write;
};
// A core's schedule: each call appends one step's accesses (a weight-tile row, a streamed
// row with the output row it completes, a row pass, a line); false when it is done.
using Steps = std::function<bool(std::vector<Seg>&)>;

// A GEMM tile as the core walks it: S weight rows (RWMA: strided rows of the row-major
// weight; BWMA: one contiguous S x S tile), then `rows` input rows and output rows, the
// output row lagging the input by the array's 2S - 1 rows of fill.
struct Tile {
  uint64_t w, in, out;
  int64_t w_stride, w_rows, w_bytes, in_stride, out_stride, rows;
};

struct CoreWork {
  int64_t units = 0, groups = 0, issues = 0;
  Steps steps;
};

Steps tile_steps(std::vector<Tile> tiles, int64_t S, int a, int b, int y) {
  size_t t = 0;
  int64_t phase = 0;
  return [=](std::vector<Seg>& out) mutable {
    while (t < tiles.size()) {
      const Tile& x = tiles[t];
      if (phase < x.w_rows) {
        out.push_back({b, x.w + phase * x.w_stride, x.w_bytes, false});
        ++phase;
        return true;
      }
      // Stream step i: input row i (issues i*W .. i*W + W - 1) and the outputs that become
      // valid during those issues (valid output o at issue o + L, L = W (2S - 1) - 1),
      // touched word range by word range in the output rows they fall in.
      const int64_t i = phase - x.w_rows, W = S / 4, L = W * (2 * S - 1) - 1;
      const int64_t total = W * (x.rows + 2 * S - 1) - 1;
      if (i * W < total) {
        if (i < x.rows) out.push_back({a, x.in + i * x.in_stride, S, false});
        const int64_t o0 = std::max<int64_t>(0, i * W - L), o1 = std::min(std::min((i + 1) * W, total) - L, x.rows * W);
        for (int64_t o = o0; o < o1;) {
          const int64_t r = o / W, end = std::min(o1, (r + 1) * W);
          out.push_back({y, x.out + r * x.out_stride + (o % W) * 4, (end - o) * 4, true});
          o = end;
        }
        ++phase;
        return true;
      }
      ++t, phase = 0;
    }
    return false;
  };
}

// TiC-SAT's RWMA and BWMA GEMM schedules (see hwmodel/reference/kernels.h for the loop
// nests in code): the tiles of core `core`, in order.
CoreWork gemm_work(LayerOp op, Arrangement arr, const LayerDims& d, int64_t S, int64_t P, int64_t core,
                   const std::vector<Operand>& ops, const std::vector<int>& ids) {
  const LayerGemm g = layer_gemm(op, arr, d, S);
  const int64_t W = S / 4, M = g.m, K = g.k, N = g.n;
  std::vector<Tile> tiles;
  CoreWork w;
  auto add = [&](const Tile& x) {
    tiles.push_back(x);
    w.units += W * x.rows;
    w.groups += 1;
    w.issues += S * W + W * (x.rows + 2 * S - 1) - 1;
  };
  for (const auto& in : g.instances) {
    const uint64_t A = kRegionBase + ops[in.a].offset + in.a_off, B = kRegionBase + ops[in.b].offset + in.b_off,
                   Y = kRegionBase + ops[in.y].offset + in.y_off;
    if (arr == Arrangement::bwma) {
      const auto [p0, p1] = core_rows(N / S, P, core, 1);
      for (int64_t np = p0; np < p1; ++np)
        for (int64_t kt = 0; kt < K / S; ++kt)
          add({B + (np * (K / S) + kt) * S * S, A + kt * g.a_panel, Y + np * g.y_panel, 0, 1, S * S, S, S, M});
      continue;
    }
    const int64_t rb = std::min<int64_t>(128, M);
    const int64_t kt1 = std::min<int64_t>(64, K) / S, ratio = 64 / std::min<int64_t>(64, K);
    const int64_t nt1 = std::min<int64_t>(32 * ratio, N) / S;
    const int64_t blocks = (M + rb - 1) / rb, per_l2 = std::min<int64_t>(512 / rb, blocks);
    const int64_t kt2 = std::min<int64_t>(256, K) / S / kt1, nt2 = std::min<int64_t>(256, N) / S / nt1;
    for (int64_t gi = 0; gi * per_l2 < blocks; ++gi) {
      const auto [b0, b1] = core_rows(std::min(per_l2, blocks - gi * per_l2), P, core, 1);
      for (int64_t kc = 0; kc < K / S / kt2 / kt1; ++kc)
        for (int64_t nc = 0; nc < N / S / nt2 / nt1; ++nc)
          for (int64_t blk = b0; blk < b1; ++blk)
            for (int64_t tr2 = 0; tr2 < kt2; ++tr2)
              for (int64_t tc2 = 0; tc2 < nt2; ++tc2)
                for (int64_t tr1 = 0; tr1 < kt1; ++tr1)
                  for (int64_t tc1 = 0; tc1 < nt1; ++tc1) {
                    const int64_t kt = (kc * kt2 + tr2) * kt1 + tr1, nt = (nc * nt2 + tc2) * nt1 + tc1;
                    const int64_t row0 = (gi * per_l2 + blk) * rb, rows = std::min(rb, M - row0);
                    add({B + kt * S * g.ldb + nt * S, A + row0 * g.lda + kt * S, Y + row0 * g.ldy + nt * S, g.ldb,
                         S, S, g.lda, g.ldy, rows});
                  }
    }
  }
  const auto& in0 = g.instances.front();
  w.steps = tile_steps(std::move(tiles), S, ids[in0.a], ids[in0.b], ids[in0.y]);
  return w;
}

// A row op's core: steps(i) emits step i of n.
CoreWork indexed(int64_t n, std::function<void(int64_t, std::vector<Seg>&)> emit) {
  CoreWork w;
  int64_t i = 0;
  w.steps = [=](std::vector<Seg>& out) mutable {
    if (i >= n) return false;
    emit(i++, out);
    return true;
  };
  return w;
}

// The accesses of row r of a seq-row matrix at `base`: contiguous (RWMA) or S bytes in each
// of len / S panels (BWMA).
void row_segs(Arrangement arr, int op, uint64_t base, int64_t r, int64_t len, int64_t S, int64_t panel, bool write,
              std::vector<Seg>& out) {
  if (arr == Arrangement::rwma) {
    out.push_back({op, base + r * len, len, write});
    return;
  }
  for (int64_t j = 0; j < len / S; ++j) out.push_back({op, base + j * panel + r * S, S, write});
}

CoreWork other_work(LayerOp op, Arrangement arr, const LayerDims& d, int64_t S, int64_t P, int64_t core,
                    const std::vector<Operand>& ops, const std::vector<int>& ids) {
  const int64_t s = d.seq, hd = d.head_dim, h = d.hidden;
  const uint64_t base0 = kRegionBase + ops[0].offset;
  const int64_t align = arr == Arrangement::bwma ? std::max<int64_t>(1, 64 / S) : 1;
  switch (op) {
    case LayerOp::k_transpose: {
      const uint64_t out = kRegionBase + ops[1].offset;
      if (arr == Arrangement::rwma) {  // per 4-row block of K: 4 words read per column word, 4 written
        const auto i01 = core_rows(s / 4, P, core, 1);  // no structured binding: clang 14 cannot capture one
        const int64_t i0 = i01.first, i1 = i01.second;
        const int64_t n = i1 - i0;
        CoreWork w = indexed(d.heads * n, [=](int64_t k, std::vector<Seg>& o) {
          const int64_t head = k / n, i = i0 + k % n;
          for (int64_t j = 0; j < hd / 4; ++j) {
            for (int64_t q = 0; q < 4; ++q) o.push_back({ids[0], base0 + h + head * hd + (4 * i + q) * 3 * h + 4 * j, 4, false});
            for (int64_t q = 0; q < 4; ++q) o.push_back({ids[1], out + head * hd * s + (4 * j + q) * s + 4 * i, 4, true});
          }
        });
        w.units = d.heads * n * hd, w.groups = d.heads * n;
        return w;
      }
      const auto i01 = core_rows(s / S, P, core, 1);  // no structured binding: clang 14 cannot capture one
      const int64_t i0 = i01.first, i1 = i01.second;
      const int64_t n = (i1 - i0) * (hd / S);
      CoreWork w = indexed(d.heads * n, [=](int64_t k, std::vector<Seg>& o) {
        const int64_t head = k / n, i = i0 + (k % n) / (hd / S), j = (k % n) % (hd / S);
        o.push_back({ids[0], base0 + (h + head * hd) * s + (j * (s / S) + i) * S * S, S * S, false});
        o.push_back({ids[1], out + head * hd * s + (i * (hd / S) + j) * S * S, S * S, true});
      });
      w.units = d.heads * n * S * S / 4, w.groups = d.heads * n;
      return w;
    }
    case LayerOp::softmax: {
      const auto r01 = core_rows(s, P, core, align);  // no structured binding: clang 14 cannot capture one
      const int64_t r0 = r01.first, r1 = r01.second;
      const int64_t n = r1 - r0;
      CoreWork w = indexed(d.heads * n * 2, [=](int64_t k, std::vector<Seg>& o) {
        const int64_t head = k / (2 * n), r = r0 + (k % (2 * n)) / 2;
        row_segs(arr, ids[0], base0 + head * s * s, r, s, S, s * S, true, o);
      });
      w.units = d.heads * n * 2 * s, w.groups = d.heads * n;
      return w;
    }
    case LayerOp::layernorm: {
      const auto r01 = core_rows(s, P, core, align);  // no structured binding: clang 14 cannot capture one
      const int64_t r0 = r01.first, r1 = r01.second;
      const int64_t n = r1 - r0;
      CoreWork w = indexed(n * 3, [=](int64_t k, std::vector<Seg>& o) {
        row_segs(arr, ids[0], base0, r0 + k / 3, h, S, s * S, k % 3 == 2, o);
      });
      w.units = n * 3 * h, w.groups = n;
      return w;
    }
    case LayerOp::residual_add:
    case LayerOp::gelu: {
      const bool add = op == LayerOp::residual_add;
      const int64_t bytes = ops[0].bytes;
      const auto l01 = core_rows((bytes + 63) / 64, P, core, 1);  // no structured binding: clang 14 cannot capture one
      const int64_t l0 = l01.first, l1 = l01.second;
      const uint64_t y = add ? kRegionBase + ops[1].offset : base0;
      CoreWork w = indexed(l1 - l0, [=](int64_t k, std::vector<Seg>& o) {
        const int64_t off = (l0 + k) * 64, len = std::min<int64_t>(64, bytes - off);
        if (add) o.push_back({ids[0], base0 + off, len, false});
        o.push_back({ids[add ? 1 : 0], y + off, len, true});
      });
      const int64_t span = std::max<int64_t>(0, std::min(bytes, l1 * 64) - l0 * 64);
      w.units = add ? span / 4 : span, w.groups = 1;
      return w;
    }
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

double dram_latency_cycles(const Traffic& t, const SystemDesc& s) {
  // Latency of one LLC miss: the op's row-buffer hit/miss mix of DRAM lines (ns -> cycles).
  const int64_t lines = t.read_lines() + t.write_lines();
  const double miss = lines > 0 ? static_cast<double>(t.row_misses()) / lines : 1.0;
  return (miss * s.dram.row_miss_ns + (1 - miss) * s.dram.row_hit_ns) * s.clock_ghz;
}

}  // namespace

CoreCoefficients load_coefficients(const std::string& path) {
  const auto j = read_json_file(path);
  // A json default: a "format" of another JSON type compares unequal (as machine.json's reader).
  check(j.is_object() && j.value("format", nlohmann::json()) == "bertlab-core-coefficients",
        "{}: expected format 'bertlab-core-coefficients'", path);
  check(j.contains("entries") && j.at("entries").is_array(), "{}: field 'entries' must be an array", path);
  CoreCoefficients c;
  const auto& entries = j.at("entries");
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    try {  // a missing field or one of another type: named here, not an internal error
      const std::string arr = e.at("arrangement");
      check(arr == "rwma" || arr == "bwma", "{}: arrangement must be rwma or bwma, got '{}'", path, arr);
      check(json_integer_in(e.at("kernel"), 1, 4096), "{}: entries[{}]: kernel must be an integer in [1, 4096], got {}",
            path, i, e.at("kernel").dump());
      c.entries[{layer_op_from_string(e.at("op")), arr == "rwma" ? Arrangement::rwma : Arrangement::bwma,
                 e.at("kernel").get<int64_t>()}] = {e.at("per_unit").get<double>(), e.at("per_group").get<double>()};
    } catch (const nlohmann::json::exception&) {
      fail("{}: entries[{}] must hold op and arrangement (strings), kernel (an integer), per_unit and per_group "
           "(numbers), got {}", path, i, e.dump().substr(0, 120));
    }
  }
  return c;
}

OpModel model_op(LayerOp op, Arrangement a, const LayerDims& d, const SystemDesc& sys, const CoreCoefficients& c,
                 const CoreStack& stack) {
  const int64_t P = sys.cores, S = sys.array.kernel;
  check(P >= 1 && (S == 4 || S == 8 || S == 16 || S == 32), "core model: cores {} / kernel {} not supported", P, S);
  for (const StackLine& l : stack.lines) {
    check(l.l1_set >= 0 && l.l1_set < sys.l1.sets(), "core model: stack line in L1 set {}: expected a set in 0..{}",
          l.l1_set, sys.l1.sets() - 1);
    check(l.per_step > 0 && std::isfinite(l.per_step),
          "core model: stack line in L1 set {}: {} touches per step, expected a positive number", l.l1_set, l.per_step);
  }
  TraceSim sim(sys, P);
  const auto ops = op_operands(op, d);
  std::vector<int> ids;
  for (const auto& o : ops) ids.push_back(sim.operand(o.name));
  // The stack stream: core c's stack lines lie in its private address range (c + 1) << 44
  // (as the lackey replay maps each process's non-operand addresses), one in each given L1
  // set; they are warm and dirty when the op starts (the kernel's frames were written by its
  // caller), so they are touched once before the counts restart. Then a line of at most one
  // touch per step is touched after the steps where the running sum of its rate passes a
  // whole number; a line of more than one touch per step (the kernel's locals between the
  // step's operand accesses: K transpose's 4 x 4 blocks, a layernorm pass) after the step's
  // line accesses where the running sum of rate / accesses passes a whole number, at most
  // once after each (the measured touches per step, spread evenly over the step's accesses).
  const int64_t nstack = static_cast<int64_t>(stack.lines.size());
  const int stack_id = nstack > 0 ? sim.operand("stack") : -1;
  const int64_t line = sys.l1.line_bytes;
  const bool within = std::any_of(stack.lines.begin(), stack.lines.end(), [](const StackLine& l) { return l.per_step > 1; });
  std::vector<double> due(P * nstack, 0.0);  // per core and line: touches owed
  auto touch_line = [&](int64_t core, int64_t i) {
    sim.access(core, stack_id, (static_cast<uint64_t>(core + 1) << 44) + stack.lines[i].l1_set * line, line, true);
  };
  // After a step (rates <= 1; all: every line, the warm start).
  auto stack_step = [&](int64_t core, bool all) {
    for (int64_t i = 0; i < nstack; ++i) {
      if (!all && stack.lines[i].per_step > 1) continue;
      double& d = due[core * nstack + i];
      d += stack.lines[i].per_step;
      if (!all && d < 1) continue;
      d = all ? 0 : d - 1;
      touch_line(core, i);
    }
  };
  // After one of a step's `accesses` line accesses (rates > 1).
  auto stack_between = [&](int64_t core, int64_t accesses) {
    for (int64_t i = 0; i < nstack; ++i) {
      if (stack.lines[i].per_step <= 1) continue;
      double& d = due[core * nstack + i];
      d += std::min(1.0, stack.lines[i].per_step / static_cast<double>(accesses));
      if (d < 1) continue;
      d -= 1;
      touch_line(core, i);
    }
  };
  if (nstack > 0) {
    for (int64_t core = 0; core < P; ++core) stack_step(core, true);
    sim.reset_counts();
  }
  std::vector<CoreWork> work;
  for (int64_t core = 0; core < P; ++core)
    work.push_back(info(op).gemm ? gemm_work(op, a, d, S, P, core, ops, ids) : other_work(op, a, d, S, P, core, ops, ids));
  // Equal-speed cores: one step each per round.
  std::vector<Seg> buf;
  std::vector<bool> live(P, true);
  std::vector<int64_t> steps(P, 0);
  for (int64_t n = P; n > 0;) {
    n = 0;
    for (int64_t core = 0; core < P; ++core) {
      if (!live[core]) continue;
      buf.clear();
      live[core] = work[core].steps(buf);
      if (!within) {
        for (const auto& g : buf) sim.access(core, g.op, g.addr, g.bytes, g.write);
      } else {  // line by line, the locals of rates above one touch per step between them
        int64_t accesses = 0;
        for (const auto& g : buf)
          if (g.bytes > 0) accesses += static_cast<int64_t>((g.addr + g.bytes - 1) / line - g.addr / line + 1);
        for (const auto& g : buf)
          for (uint64_t at = g.addr; at < g.addr + g.bytes;) {
            const uint64_t end = std::min(g.addr + g.bytes, (at / line + 1) * line);
            sim.access(core, g.op, at, static_cast<int64_t>(end - at), g.write);
            stack_between(core, accesses);
            at = end;
          }
      }
      if (!live[core]) continue;
      ++steps[core];
      if (nstack > 0) stack_step(core, false);  // the kernel's locals, at their measured rates
      n += live[core] ? 1 : 0;
    }
  }
  OpModel m;
  m.traffic = sim.finish();
  const auto it = c.entries.find({op, a, S});
  const std::array<double, 2> k = it == c.entries.end() ? std::array<double, 2>{0, 0} : it->second;
  for (const auto& w : work) {
    m.units.push_back(w.units);
    m.groups.push_back(w.groups);
    m.issues.push_back(w.issues);
    m.steps.push_back(steps[m.steps.size()]);
    m.instructions.push_back(static_cast<int64_t>(k[0] * w.units + k[1] * w.groups + 0.5));
  }
  return m;
}

OpTime op_time(const OpModel& m, const SystemDesc& sys) {
  OpTime best;
  const double dram = dram_latency_cycles(m.traffic, sys) / sys.memory_parallelism;
  for (size_t c = 0; c < m.instructions.size(); ++c) {
    OpTime t;
    t.instructions = static_cast<double>(m.instructions[c]);                  // in-order: one cycle each
    t.array = m.issues[c] * sys.array.cycles_per_issue;                       // the array instructions
    t.l1_stall = m.traffic.l1_misses[c] * sys.llc.hit_cycles;                 // L1 miss served by the LLC
    t.llc_stall = m.traffic.llc_misses[c] * dram;                             // LLC miss served by DRAM
    if (t.core() > best.core()) best = t;
  }
  best.dram = m.traffic.dram_bytes() / sys.dram_bytes_per_cycle();  // shared DRAM bandwidth floor
  return best;
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
  using Regions = std::array<std::array<Region, 2>, 2>;  // [arrangement][attention, ffn]
  auto one = [&](int64_t S, int64_t P) {
    SystemDesc sys = sys0;
    sys.cores = P;
    sys.array.kernel = S;
    Regions r{};
    for (const Arrangement a : {Arrangement::rwma, Arrangement::bwma})
      for (const auto& e : kLayerOpTable) {
        const OpModel m = model_op(e.op, a, d, sys, c);
        const OpTime t = op_time(m, sys);
        const bool attention = e.region == LayerRegion::attention;
        for (int region = 0; region < 2; ++region) {
          // Ops that run twice (residual add, layernorm) run once after each sub-layer.
          if (e.per_layer == 1 && region != (attention ? 0 : 1)) continue;
          Region& x = r[static_cast<int>(a)][region];
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
