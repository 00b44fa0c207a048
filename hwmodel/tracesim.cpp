#include "hwmodel/tracesim.h"

#include <algorithm>

#include "base/error.h"
#include "hwmodel/arrangement.h"

namespace bertlab::hw {

int64_t Traffic::read_lines() const {
  int64_t n = 0;
  for (const auto& [k, o] : operands) n += o.read_lines;
  return n;
}
int64_t Traffic::write_lines() const {
  int64_t n = 0;
  for (const auto& [k, o] : operands) n += o.write_lines;
  return n;
}
int64_t Traffic::row_misses() const {
  int64_t n = 0;
  for (const auto& [k, o] : operands) n += o.row_misses;
  return n;
}
void Traffic::add(const Traffic& o) {
  for (const auto& [k, v] : o.operands) {
    auto& d = operands[k];
    d.read_lines += v.read_lines;
    d.write_lines += v.write_lines;
    d.row_misses += v.row_misses;
    d.refetch = std::max(d.refetch, v.refetch);
    if (d.why.empty()) d.why = v.why;
  }
  if (l1_misses.size() < o.l1_misses.size()) l1_misses.resize(o.l1_misses.size());
  if (llc_misses.size() < o.llc_misses.size()) llc_misses.resize(o.llc_misses.size());
  for (size_t i = 0; i < o.l1_misses.size(); ++i) l1_misses[i] += o.l1_misses[i];
  for (size_t i = 0; i < o.llc_misses.size(); ++i) llc_misses[i] += o.llc_misses[i];
  accesses += o.accesses;
}

LruCache::LruCache(const CacheDesc& d)
    : index_(d), sets_(d.sets()), ways_(d.ways) {
  const size_t n = static_cast<size_t>(sets_ * ways_);
  line_.assign(n, kInvalid);
  stamp_.assign(n, 0);
  tag_.assign(n, 0);
  weight_.assign(n, 1);
  dirty_.assign(n, 0);
}

int64_t LruCache::set_of(uint64_t line) const {
  return index_(static_cast<int64_t>(line));
}

LruCache::Result LruCache::access(uint64_t line, bool write, int32_t tag, int64_t weight) {
  Result r;
  if (line == mru_line_) {
    if (write) {
      if (!dirty_[mru_way_]) weight_[mru_way_] = weight;  // the dirty episode's first writer
      dirty_[mru_way_] = 1, tag_[mru_way_] = tag;
    }
    r.hit = true;
    return r;
  }
  const size_t base = static_cast<size_t>(set_of(line) * ways_), end = base + static_cast<size_t>(ways_);
  ++clock_;
  for (size_t w = base; w < end; ++w) {
    if (line_[w] == line) {
      stamp_[w] = clock_;
      if (write) {
        if (!dirty_[w]) weight_[w] = weight;  // the dirty episode's first writer
        dirty_[w] = 1;
        tag_[w] = tag;
      }
      mru_line_ = line, mru_way_ = w;
      r.hit = true;
      return r;
    }
  }
  // LRU victim: the first empty way (stamp 0), else the least recently used.
  size_t victim = base;
  for (size_t w = base + 1; w < end; ++w)
    if (stamp_[w] < stamp_[victim]) victim = w;
  if (line_[victim] != kInvalid && dirty_[victim]) {
    r.evicted_dirty = true;
    r.victim_line = line_[victim];
    r.victim_tag = tag_[victim];
    r.victim_weight = weight_[victim];
  }
  line_[victim] = line;
  stamp_[victim] = clock_;
  dirty_[victim] = write;
  tag_[victim] = tag;
  weight_[victim] = weight;
  mru_line_ = line, mru_way_ = victim;
  return r;
}

std::vector<LruCache::DirtyLine> LruCache::dirty_lines_lru_order() const {
  std::vector<size_t> idx;
  for (size_t i = 0; i < line_.size(); ++i)
    if (line_[i] != kInvalid && dirty_[i]) idx.push_back(i);
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return stamp_[a] < stamp_[b]; });
  std::vector<DirtyLine> out;
  for (size_t i : idx) out.push_back({line_[i], tag_[i], weight_[i]});
  return out;
}

TraceSim::TraceSim(const SystemDesc& s, int64_t cores)
    : sys_(s),
      cores_(cores),
      line_(s.llc.line_bytes),
      line_of(line_),
      llc_(s.llc) {
  check(cores >= 1, "trace simulator: cores must be >= 1, got {}", cores);
  for (int64_t c = 0; c < cores; ++c) l1_.emplace_back(s.l1);
  t_.line_bytes = line_;
  t_.burst_bytes = s.dram.burst_bytes;
  t_.l1_misses.assign(cores, 0);
  unweighted_.assign(static_cast<size_t>(cores), L1Counts{});
  weighted_accesses_.assign(static_cast<size_t>(cores), 0);
  t_.llc_misses.assign(cores, 0);
  open_row_.assign(static_cast<size_t>(s.dram.banks), -1);
}

int TraceSim::operand_id(const std::string& name) {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return static_cast<int>(i);
  names_.push_back(name);
  counts_.emplace_back();
  t_.operands[name];
  return static_cast<int>(names_.size() - 1);
}

void TraceSim::row_access(int operand, int64_t stream, uint64_t line, int64_t weight) {
  int64_t& open = open_row_[static_cast<size_t>(stream % sys_.dram.banks)];
  const int64_t row = static_cast<int64_t>(line * line_ / sys_.dram.row_bytes);
  if (open != row) {
    counts_[operand].row_misses += weight;
    open = row;
  }
}

// Stream `stream`'s operand: stream = (operand x 2 + direction) x cores + core (dram()).
void TraceSim::drain_oldest_row(int64_t stream) {
  auto& q = write_queue_[static_cast<size_t>(stream)];
  const int operand = static_cast<int>(stream / cores_ / 2);
  const int64_t row = static_cast<int64_t>(q.front().line * line_ / sys_.dram.row_bytes);
  size_t kept = 0;
  for (const Queued& x : q) {  // the row's lines issued together, the others kept in order
    if (static_cast<int64_t>(x.line * line_ / sys_.dram.row_bytes) == row)
      row_access(operand, stream, x.line, x.weight);
    else
      q[kept++] = x;
  }
  q.resize(kept);
}

void TraceSim::dram(int operand, bool write, int64_t core, uint64_t line, int64_t weight) {
  // Stream = operand x direction x core, each on its own bank (bank colouring).
  const int64_t stream = (operand * 2 + (write ? 1 : 0)) * cores_ + core;
  OperandTraffic& o = counts_[operand];
  if (!write) {
    o.read_lines += weight;
    row_access(operand, stream, line, weight);
    return;
  }
  o.write_lines += weight;
  if (write_queue_.size() <= static_cast<size_t>(stream)) write_queue_.resize(static_cast<size_t>(stream) + 1);
  auto& q = write_queue_[static_cast<size_t>(stream)];
  q.push_back({line, weight});
  if (static_cast<int64_t>(q.size()) >= kWriteQueueLines) drain_oldest_row(stream);
}

void TraceSim::touch(int64_t core, int operand, uint64_t addr, int64_t bytes, bool write, int64_t weight,
                     CacheLevels levels) {
  if (bytes <= 0) return;
  if (levels != CacheLevels::llc_only) {
    weighted_accesses_[static_cast<size_t>(core)] += weight;
    ++unweighted_[core].accesses;
  }
  const int32_t tag = static_cast<int32_t>(operand * cores_ + core);
  for (auto ln = static_cast<uint64_t>(line_of(addr)), last = static_cast<uint64_t>(line_of(addr + bytes - 1)); ln <= last;
       ++ln) {
    if (levels != CacheLevels::llc_only && !l1_[core].access(ln, write, tag).hit) t_.l1_misses[core] += weight, ++unweighted_[core].misses;
    if (levels == CacheLevels::l1_only) continue;
    auto r = llc_.access(ln, write, tag, weight);
    if (r.evicted_dirty)
      dram(static_cast<int>(r.victim_tag / cores_), true, r.victim_tag % cores_, r.victim_line, r.victim_weight);
    if (!r.hit) {
      t_.llc_misses[core] += weight;
      dram(operand, false, core, ln, weight);
    }
  }
}

void TraceSim::run(const GemmWork& w) { arrangement_desc(w.arrangement).trace_gemm(*this, w, cores_); }

void TraceSim::run(const StreamWork& w) {
  const int64_t P = cores_;
  for (const auto& acc : w.accesses) {
    const int op = operand_id(acc.operand);
    const Sweep& s = acc.sweep;
    if (s.count <= 0 || s.width <= 0) continue;
    if (s.count == 1 || s.stride <= s.width) {  // contiguous: split whole lines across cores
      const uint64_t first = s.start / line_, last = (s.end() - 1) / line_;
      const int64_t lines = static_cast<int64_t>(last - first + 1);
      const int64_t chunk = (lines + P - 1) / P;
      for (int64_t j = 0; j < chunk; ++j)
        for (int64_t c = 0; c < P; ++c) {
          const int64_t li = c * chunk + j;
          if (li >= lines) continue;
          const uint64_t lo = std::max<uint64_t>(s.start, (first + li) * line_);
          const uint64_t hi = std::min<uint64_t>(s.end(), (first + li + 1) * line_);
          touch(c, op, lo, static_cast<int64_t>(hi - lo), acc.write);
        }
    } else {  // strided rows: split rows across cores
      const int64_t chunk = (s.count + P - 1) / P;
      for (int64_t j = 0; j < chunk; ++j)
        for (int64_t c = 0; c < P; ++c) {
          const int64_t i = c * chunk + j;
          if (i < s.count) touch(c, op, s.start + i * s.stride, s.width, acc.write);
        }
    }
  }
}

void TraceSim::run(const RowWork& w) {
  std::vector<int> in_ids;
  for (const auto& n : w.input_names) in_ids.push_back(operand_id(n));
  const int out_id = operand_id(w.output_name);
  const int64_t P = cores_;
  for (const auto& mat : w.matrices) {
    const MatrixView& o = mat.output;
    // Rows that share a cache line (column panels: L / (S*e) rows of a panel) stay on one core.
    const int64_t group = rows_sharing_a_line(o, line_);
    const int64_t chunk = ((w.rows + P - 1) / P + group - 1) / group * group;
    auto touch_row = [&](int64_t core, int op, const MatrixView& v, int64_t r, bool write) {
      for (const auto& sw : block_sweeps(v, r, 1, 0, v.cols))
        touch(core, op, sw.start, static_cast<int64_t>(sw.end() - sw.start), write);
    };
    for (int64_t i = 0; i < chunk; ++i)
      for (int64_t c = 0; c < P; ++c) {
        const int64_t r = c * chunk + i;
        if (r >= w.rows) continue;
        for (int64_t p = 0; p < w.passes; ++p)
          for (size_t k = 0; k < mat.inputs.size(); ++k)
            touch_row(c, in_ids[k], mat.inputs[k], r, false);
        touch_row(c, out_id, o, r, true);
      }
  }
}

Traffic TraceSim::finish() {
  for (const auto& d : llc_.dirty_lines_lru_order())
    dram(static_cast<int>(d.tag / cores_), true, d.tag % cores_, d.line, d.weight);
  for (size_t stream = 0; stream < write_queue_.size(); ++stream)
    while (!write_queue_[stream].empty()) drain_oldest_row(static_cast<int64_t>(stream));
  for (size_t i = 0; i < names_.size(); ++i) t_.operands[names_[i]] = counts_[i];
  t_.accesses = 0;
  for (const int64_t n : weighted_accesses_) t_.accesses += n;
  return t_;
}

}  // namespace bertlab::hw
