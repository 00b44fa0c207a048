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
  line_.assign(n, 0);
  stamp_.assign(n, 0);
  tag_.assign(n, 0);
  valid_.assign(n, 0);
  dirty_.assign(n, 0);
}

int64_t LruCache::set_of(uint64_t line) const {
  return index_(static_cast<int64_t>(line));
}

LruCache::Result LruCache::access(uint64_t line, bool write, int32_t tag) {
  Result r;
  if (line == mru_line_) {
    if (write) dirty_[mru_way_] = 1, tag_[mru_way_] = tag;
    r.hit = true;
    return r;
  }
  const size_t base = static_cast<size_t>(set_of(line) * ways_);
  ++clock_;
  for (size_t w = base; w < base + ways_; ++w) {
    if (valid_[w] && line_[w] == line) {
      stamp_[w] = clock_;
      if (write) {
        dirty_[w] = 1;
        tag_[w] = tag;
      }
      mru_line_ = line, mru_way_ = w;
      r.hit = true;
      return r;
    }
  }
  size_t victim = base;
  for (size_t w = base; w < base + ways_; ++w) {
    if (!valid_[w]) {
      victim = w;
      break;
    }
    if (stamp_[w] < stamp_[victim]) victim = w;
  }
  if (valid_[victim] && dirty_[victim]) {
    r.evicted_dirty = true;
    r.victim_line = line_[victim];
    r.victim_tag = tag_[victim];
  }
  valid_[victim] = 1;
  line_[victim] = line;
  stamp_[victim] = clock_;
  dirty_[victim] = write;
  tag_[victim] = tag;
  mru_line_ = line, mru_way_ = victim;
  return r;
}

std::vector<std::pair<uint64_t, int32_t>> LruCache::dirty_lines_lru_order() const {
  std::vector<size_t> idx;
  for (size_t i = 0; i < valid_.size(); ++i)
    if (valid_[i] && dirty_[i]) idx.push_back(i);
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return stamp_[a] < stamp_[b]; });
  std::vector<std::pair<uint64_t, int32_t>> out;
  for (size_t i : idx) out.emplace_back(line_[i], tag_[i]);
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
  t_.llc_misses.assign(cores, 0);
}

int TraceSim::operand_id(const std::string& name) {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return static_cast<int>(i);
  names_.push_back(name);
  t_.operands[name];
  return static_cast<int>(names_.size() - 1);
}

void TraceSim::row_access(int operand, int64_t stream, uint64_t line) {
  const int64_t bank = stream % sys_.dram.banks;
  const int64_t row = static_cast<int64_t>(line * line_ / sys_.dram.row_bytes);
  auto it = open_row_.find(bank);
  if (it == open_row_.end() || it->second != row) {
    t_.operands[names_[operand]].row_misses += 1;
    open_row_[bank] = row;
  }
}

void TraceSim::drain_oldest_row(int operand, int64_t stream) {
  auto& q = write_queue_[stream];
  const int64_t row = static_cast<int64_t>(q.front() * line_ / sys_.dram.row_bytes);
  std::vector<uint64_t> keep;
  for (uint64_t ln : q) {
    if (static_cast<int64_t>(ln * line_ / sys_.dram.row_bytes) == row)
      row_access(operand, stream, ln);
    else
      keep.push_back(ln);
  }
  q = std::move(keep);
}

void TraceSim::dram(int operand, bool write, int64_t core, uint64_t line) {
  // Stream = operand x direction x core, each on its own bank (bank colouring).
  const int64_t stream = (operand * 2 + (write ? 1 : 0)) * cores_ + core;
  auto& o = t_.operands[names_[operand]];
  if (!write) {
    o.read_lines += 1;
    row_access(operand, stream, line);
    return;
  }
  o.write_lines += 1;
  stream_operand_[stream] = operand;
  auto& q = write_queue_[stream];
  q.push_back(line);
  if (static_cast<int64_t>(q.size()) >= kWriteQueueLines) drain_oldest_row(operand, stream);
}

void TraceSim::touch(int64_t core, int operand, uint64_t addr, int64_t bytes, bool write) {
  if (bytes <= 0) return;
  t_.accesses += 1;
  const int32_t tag = static_cast<int32_t>(operand * cores_ + core);
  for (auto ln = static_cast<uint64_t>(line_of(addr)), last = static_cast<uint64_t>(line_of(addr + bytes - 1)); ln <= last;
       ++ln) {
    if (!l1_[core].access(ln, write, tag).hit) t_.l1_misses[core] += 1;
    auto r = llc_.access(ln, write, tag);
    if (r.evicted_dirty)
      dram(static_cast<int>(r.victim_tag / cores_), true, r.victim_tag % cores_, r.victim_line);
    if (!r.hit) {
      t_.llc_misses[core] += 1;
      dram(operand, false, core, ln);
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
    // Rows that share a cache line (BWMA: L / (S*e) rows of a panel) stay on one core.
    const int64_t group = o.panel_width ? std::max<int64_t>(1, line_ / o.row_stride) : 1;
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
  for (const auto& [line, tag] : llc_.dirty_lines_lru_order())
    dram(static_cast<int>(tag / cores_), true, tag % cores_, line);
  for (auto& [stream, q] : write_queue_)
    while (!q.empty()) drain_oldest_row(stream_operand_[stream], stream);
  return t_;
}

}  // namespace bertlab::hw
