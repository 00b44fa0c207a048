// The core model's simulator driver (core_walk.h CoreSim): the cores' schedule steps interleaved
// into the exact simulator (tracesim.h), through each core's data TLB (PageLru) and the stack
// lines of its compiled kernel, and the split walk's marks (SegKind). The schedules themselves
// are in core_walk_gemm.cpp (the GEMM's) and core_walk.cpp (the others).
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "hwmodel/core_walk.h"

namespace bertlab::hw {

PageLru::PageLru(const TlbDesc& t)
    : sets_(t.sets()),
      ways_(t.entries / t.sets()),
      page_(static_cast<size_t>(t.entries), kEmpty),
      prev_(static_cast<size_t>(t.entries), kNone),
      next_(static_cast<size_t>(t.entries), kNone),
      head_(static_cast<size_t>(sets_), kNone),
      used_(static_cast<size_t>(sets_), 0) {
  size_t table = 4;  // at most a quarter full: short probe runs
  while (table < static_cast<size_t>(4 * t.entries)) table *= 2;
  key_.assign(table, kEmpty);
  val_.assign(table, kNone);
  shift_ = 64 - std::countr_zero(table);
}

int32_t PageLru::find(uint64_t page) const {
  const size_t mask = key_.size() - 1;
  for (size_t i = slot_of(page);; i = (i + 1) & mask) {
    if (key_[i] == page) return val_[i];
    if (key_[i] == kEmpty) return kNone;
  }
}

void PageLru::table_insert(uint64_t page, int32_t e) {
  const size_t mask = key_.size() - 1;
  size_t i = slot_of(page);
  while (key_[i] != kEmpty) i = (i + 1) & mask;
  key_[i] = page, val_[i] = e;
}

// Linear probing's deletion by backward shift: later keys of the run move into the hole when
// their home slot does not lie cyclically between the hole and them.
void PageLru::table_erase(uint64_t page) {
  const size_t mask = key_.size() - 1;
  size_t i = slot_of(page);
  while (key_[i] != page) i = (i + 1) & mask;
  for (size_t j = (i + 1) & mask; key_[j] != kEmpty; j = (j + 1) & mask) {
    const size_t home = slot_of(key_[j]);
    if (((j - home) & mask) < ((j - i) & mask)) continue;  // home in (i, j]: stays
    key_[i] = key_[j], val_[i] = val_[j];
    i = j;
  }
  key_[i] = kEmpty, val_[i] = kNone;
}

void PageLru::unlink(int32_t e) {
  next_[prev_[e]] = next_[e];
  prev_[next_[e]] = prev_[e];
}

void PageLru::push_front(int64_t set, int32_t e) {  // e becomes the most recent of its set
  const int32_t h = head_[set];
  if (h == kNone) {
    prev_[e] = next_[e] = e;
  } else {
    prev_[e] = prev_[h], next_[e] = h;
    next_[prev_[h]] = e, prev_[h] = e;
  }
  head_[set] = e;
}

bool PageLru::access(uint64_t page) {
  if (page == last_) return true;
  last_ = page;
  const int64_t set = static_cast<int64_t>(page & static_cast<uint64_t>(sets_ - 1));  // modulo index (sets: a power of two)
  if (const int32_t e = find(page); e != kNone) {
    if (e != head_[set]) {  // most recent first
      unlink(e);
      push_front(set, e);
    }
    return true;
  }
  int32_t e;
  if (used_[set] < ways_) {
    e = static_cast<int32_t>(set * ways_ + used_[set]++);
  } else {  // evict the least recent: the ring's tail, before the head
    e = prev_[head_[set]];
    table_erase(page_[e]);
    if (e == head_[set]) head_[set] = kNone;  // a one-way set
    else unlink(e);
  }
  page_[e] = page;
  table_insert(page, e);
  push_front(set, e);
  return false;
}

CoreSim::CoreSim(const SystemDesc& s, const CoreStack& stack)
    : sys_(s),
      stack_(stack),
      sim_(s, s.cores),
      tlb_misses_(static_cast<size_t>(s.cores), 0),
      tlb_unweighted_(static_cast<size_t>(s.cores), 0),
      tile_start_(static_cast<size_t>(s.cores)),
      tile_(static_cast<size_t>(s.cores)),
      tile_open_(static_cast<size_t>(s.cores), false) {
  if (s.tlb.entries > 0) tlb_.assign(static_cast<size_t>(s.cores), PageLru(s.tlb));
  for (const StackLine& l : stack_.lines) {
    check(l.l1_set >= 0 && l.l1_set < s.l1.sets(), "core model: stack line in L1 set {}: expected a set in 0..{}",
          l.l1_set, s.l1.sets() - 1);
    check(l.per_step > 0 && std::isfinite(l.per_step),
          "core model: stack line in L1 set {}: {} touches per step, expected a positive number", l.l1_set, l.per_step);
  }
}

void CoreSim::touch_stack(int64_t core, size_t i) {
  // Core c's stack lines lie in its private address range (c + 1) << 44 (as the lackey
  // replay maps each process's non-operand addresses), one in each given L1 set.
  sim_.access(core, stack_id_, (static_cast<uint64_t>(core + 1) << 44) + stack_.lines[i].l1_set * sys_.l1.line_bytes,
              sys_.l1.line_bytes, true);
}

// Every page the access touches is looked up in the core's TLB; a miss is a page walk.
void CoreSim::translate(int64_t core, uint64_t addr, int64_t bytes, int64_t weight) {
  if (tlb_.empty() || bytes <= 0) return;
  const uint64_t page = static_cast<uint64_t>(sys_.tlb.page_bytes);
  for (uint64_t p = addr / page; p <= (addr + bytes - 1) / page; ++p)
    if (!tlb_[core].access(p)) tlb_misses_[core] += weight, ++tlb_unweighted_[core];
}

// A split walk's L1-pass mark (SegKind): a tile starts, or the tile before is repeated.
void CoreSim::mark(int64_t core, const CoreSeg& m) {
  const auto c = static_cast<size_t>(core);
  const Counts now{sim_.l1_unweighted(core), tlb_unweighted_[c]};
  if (m.kind == SegKind::tile) {
    tile_start_[c] = now, tile_open_[c] = true;
    return;
  }
  check(stack_.lines.empty(), "core model: a repeated tile in a walk with stack lines (their touches are per step)");
  if (tile_open_[c]) {  // the tile before it ends here
    const Counts& s0 = tile_start_[c];
    tile_[c] = {{now.l1.misses - s0.l1.misses, now.l1.accesses - s0.l1.accesses}, now.tlb - s0.tlb};
    tile_open_[c] = false;
  }
  sim_.add_l1_counts(core, tile_[c].l1, m.weight);
  tlb_misses_[c] += tile_[c].tlb * m.weight;
}

std::vector<int64_t> CoreSim::run(std::vector<CoreShare>& shares) {
  const int64_t P = static_cast<int64_t>(shares.size());
  const size_t nstack = stack_.lines.size();
  const int64_t line = sys_.l1.line_bytes;
  // The stack stream: warm and dirty when the first kernel starts (the kernel's frames were
  // written by its caller), so touched once before the counts restart. Then a line of at most
  // one touch per step is touched after the steps where the running sum of its rate passes a
  // whole number; a line of more than one touch per step (the kernel's locals between the
  // step's operand accesses: K transpose's 4 x 4 blocks, a layernorm pass) after the step's
  // line accesses where the running sum of rate / accesses passes a whole number, at most
  // once after each (the measured touches per step, spread evenly over the step's accesses).
  if (nstack > 0 && stack_id_ < 0) {
    stack_id_ = sim_.operand("stack");
    due_.assign(static_cast<size_t>(P) * nstack, 0.0);
    for (int64_t core = 0; core < P; ++core)
      for (size_t i = 0; i < nstack; ++i) touch_stack(core, i);
    sim_.reset_counts();
  }
  const bool within = std::any_of(stack_.lines.begin(), stack_.lines.end(), [](const StackLine& l) { return l.per_step > 1; });
  auto stack_step = [&](int64_t core) {  // after a step: the lines of at most one touch per step
    for (size_t i = 0; i < nstack; ++i) {
      if (stack_.lines[i].per_step > 1) continue;
      double& d = due_[core * nstack + i];
      d += stack_.lines[i].per_step;
      if (d < 1) continue;
      d -= 1;
      touch_stack(core, i);
    }
  };
  auto stack_between = [&](int64_t core, int64_t accesses) {  // after one of a step's line accesses
    for (size_t i = 0; i < nstack; ++i) {
      if (stack_.lines[i].per_step <= 1) continue;
      double& d = due_[core * nstack + i];
      d += std::min(1.0, stack_.lines[i].per_step / static_cast<double>(accesses));
      if (d < 1) continue;
      d -= 1;
      touch_stack(core, i);
    }
  };
  // Cores whose L1 counts are another's (CoreShare::l1_as): that core's counts at the start.
  std::vector<Counts> start(static_cast<size_t>(P));
  for (int64_t core = 0; core < P; ++core) start[core] = {sim_.l1_weighted(core), tlb_misses_[core]};
  // Equal-speed cores: one step each per round; a step of span s (a split walk's LLC pass)
  // takes its core s rounds, and rounds in which every live core is busy are skipped.
  std::vector<CoreSeg> buf;
  std::vector<bool> live(P, true);
  std::vector<int64_t> steps(P, 0), busy_until(P, 0);
  for (int64_t n = P, round = 0; n > 0;) {
    n = 0;
    int64_t next = std::numeric_limits<int64_t>::max();  // the round at which a live core is free again
    for (int64_t core = 0; core < P; ++core) {
      if (!live[core]) continue;
      if (busy_until[core] > round) {
        n += 1, next = std::min(next, busy_until[core]);
        continue;
      }
      buf.clear();
      live[core] = shares[core].steps(buf);
      busy_until[core] = round + (buf.empty() ? 1 : buf.front().span);
      if (live[core]) next = std::min(next, busy_until[core]);
      // A split GEMM walk's LLC pass (gemm_share) is not a step of the kernel: no TLB, no stack.
      const bool llc_pass = !buf.empty() && buf.front().levels == CacheLevels::llc_only;
      if (llc_pass) {
        for (const auto& g : buf) sim_.access(core, g.op, g.addr, g.bytes, g.write, g.weight, g.levels);
        n += live[core] ? 1 : 0;
        continue;
      }
      for (const auto& g : buf) {
        if (g.kind != SegKind::access) mark(core, g);
        translate(core, g.addr, g.bytes, g.weight);
      }
      if (!within) {
        for (const auto& g : buf) sim_.access(core, g.op, g.addr, g.bytes, g.write, g.weight, g.levels);
      } else {  // line by line, the locals of rates above one touch per step between them
        int64_t accesses = 0;
        for (const auto& g : buf)
          if (g.bytes > 0) accesses += static_cast<int64_t>((g.addr + g.bytes - 1) / line - g.addr / line + 1);
        for (const auto& g : buf)
          for (uint64_t at = g.addr; at < g.addr + g.bytes;) {
            const uint64_t end = std::min(g.addr + g.bytes, (at / line + 1) * line);
            sim_.access(core, g.op, at, static_cast<int64_t>(end - at), g.write, g.weight, g.levels);
            stack_between(core, accesses);
            at = end;
          }
      }
      if (!live[core]) continue;
      ++steps[core];
      if (nstack > 0) stack_step(core);  // the kernel's locals, at their measured rates
      n += 1;
    }
    round = next;
  }
  for (int64_t core = 0; core < P; ++core) {
    const int64_t from = shares[core].l1_as;
    if (from < 0) continue;
    check(from < P && shares[from].l1_as < 0, "core model: core {} counts the L1 of core {}, which walks none", core, from);
    const TraceSim::L1Counts now = sim_.l1_weighted(from), then = start[from].l1;
    sim_.add_l1_counts(core, {now.misses - then.misses, now.accesses - then.accesses}, 1);
    tlb_misses_[core] += tlb_misses_[from] - start[from].tlb;
  }
  return steps;
}

}  // namespace bertlab::hw
