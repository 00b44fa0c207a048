#pragma once
// Exact trace simulator: generates every address of the schedules in work.h and feeds
// per-core L1 caches, a shared set-associative LRU last-level cache (write-back,
// write-allocate) and an open-page DRAM bank model. Slow by design; used on small shapes to
// check the analytic model (analytic.h) term by term.
//
// Modelling choices shared with the analytic model (docs/hwmodel.md):
// - the LLC sees every access (L1 hits update LLC recency too);
// - DRAM requests form streams (operand x read/write x core); each stream is served by its
//   own bank (bank colouring), stream s -> bank s mod banks, a bank holds one open row;
// - write-backs wait in a per-stream write queue of `kWriteQueueLines` lines; when it is
//   full, all queued writes to the row of the oldest one are issued together (FR-FCFS
//   write drain), so the set-by-set eviction order does not scatter the row accesses;
// - at the end dirty lines are written back oldest first.
#include <cstdint>
#include <string>
#include <vector>

#include "hwmodel/layout.h"
#include "hwmodel/system.h"
#include "hwmodel/work.h"

namespace bertlab::hw {

class LruCache {
 public:
  LruCache(const CacheDesc& d);
  struct Result {
    bool hit = false;
    bool evicted_dirty = false;
    uint64_t victim_line = 0;
    int32_t victim_tag = 0;
    int64_t victim_weight = 1;
  };
  // `line` is the line address (byte address / line size); `tag` names the writer stream;
  // `weight`: how many accesses of the full walk this one stands for (1 but in a sampled walk,
  // core_walk.h). A line keeps the weight of the first write since it was last clean, and its
  // write-back counts that many times: a line two neighbouring iterations share is written back
  // once for the pair, so it belongs to the first (a sampled walk re-warms with weight 0 the
  // iteration before a representative, whose shared line then counts nothing).
  Result access(uint64_t line, bool write, int32_t tag, int64_t weight = 1);
  struct DirtyLine {
    uint64_t line;
    int32_t tag;
    int64_t weight;
  };
  // Dirty lines with their tags and weights, least recently used first.
  std::vector<DirtyLine> dirty_lines_lru_order() const;

 private:
  int64_t set_of(uint64_t line) const;
  SetIndex index_;  // modulo or XOR-folded (system.h)
  int64_t sets_, ways_;
  uint64_t clock_ = 0;
  // Per way: its line (kInvalid: empty) and last use (0: never, so an empty way is the first
  // victim, as the first empty way of the set).
  static constexpr uint64_t kInvalid = ~uint64_t{0};
  std::vector<uint64_t> line_, stamp_;
  std::vector<int32_t> tag_;
  std::vector<int64_t> weight_;  // of the last write
  std::vector<uint8_t> dirty_;
  // The line of the last access and its way: the next access to the same line hits without
  // a scan and keeps its stamp, which is already the newest (the same LRU order; speed only).
  uint64_t mru_line_ = ~uint64_t{0};
  size_t mru_way_ = 0;
};

// Which caches an access goes through: both, as every walk but one does; the core's L1 alone
// (a split walk's sampled L1 and TLB pass, core_walk.h); the shared LLC and DRAM alone (its
// line-granular LLC pass). L1 and LLC see the same accesses and keep separate LRU states (the
// LLC sees every access, L1 hits too), so the two passes together give the same kinds of counts
// as one walk through both.
enum class CacheLevels : uint8_t { both, l1_only, llc_only };

class TraceSim {
 public:
  TraceSim(const SystemDesc& s, int64_t cores);
  void run(const GemmWork& w);
  void run(const StreamWork& w);
  void run(const RowWork& w);
  // An address trace replayed from outside (valgrind's lackey, lackey_replay.h): the id of
  // an operand (its DRAM request streams), then one access of core `core` to `bytes` bytes
  // at `addr`. weight: the accesses of the full walk it stands for (a sampled walk's
  // representative iterations, core_walk.h): every count it causes is counted that many times.
  int operand(const std::string& name) { return operand_id(name); }
  void access(int64_t core, int operand, uint64_t addr, int64_t bytes, bool write, int64_t weight = 1,
              CacheLevels levels = CacheLevels::both) {
    touch(core, operand, addr, bytes, write, weight, levels);
  }
  // Core `core`'s L1 misses and accesses (those through its L1) so far, each counted once
  // whatever its weight.
  struct L1Counts {
    int64_t misses = 0, accesses = 0;
  };
  const L1Counts& l1_unweighted(int64_t core) const { return unweighted_[static_cast<size_t>(core)]; }
  // ... and counted with their weights (the counts the walk reports).
  L1Counts l1_weighted(int64_t core) const {
    return {t_.l1_misses[static_cast<size_t>(core)], weighted_accesses_[static_cast<size_t>(core)]};
  }
  // Counts a split walk's repeated tile (core_walk.h SegKind::repeat) without walking it: its L1
  // misses and accesses, `weight` times each.
  void add_l1_counts(int64_t core, const L1Counts& tile, int64_t weight) {
    t_.l1_misses[static_cast<size_t>(core)] += tile.misses * weight;
    weighted_accesses_[static_cast<size_t>(core)] += tile.accesses * weight;
  }
  Traffic finish();  // writes back the dirty lines and returns the counts
  // Zeroes the counts and keeps the caches' and DRAM's state (a warm start, lackey_replay.h).
  void reset_counts() {
    for (auto& o : counts_) o = OperandTraffic{};
    t_.l1_misses.assign(cores_, 0), t_.llc_misses.assign(cores_, 0);
    weighted_accesses_.assign(static_cast<size_t>(cores_), 0);
  }

 private:
  void touch(int64_t core, int operand, uint64_t addr, int64_t bytes, bool write, int64_t weight = 1,
             CacheLevels levels = CacheLevels::both);
  void dram(int operand, bool write, int64_t core, uint64_t line, int64_t weight);
  void row_access(int operand, int64_t stream, uint64_t line, int64_t weight);
  void drain_oldest_row(int64_t stream);
  int operand_id(const std::string& name);

  SystemDesc sys_;
  int64_t cores_, line_;
  BlockOf line_of;  // an address's line (layout.h)
  LruCache llc_;
  std::vector<LruCache> l1_;
  std::vector<L1Counts> unweighted_;  // per core
  std::vector<int64_t> weighted_accesses_;  // per core (finish() sums them into t_.accesses)
  std::vector<std::string> names_;
  std::vector<OperandTraffic> counts_;  // per operand id (t_.operands by name at finish)
  std::vector<int64_t> open_row_;       // per bank: its open row (-1: none)
  struct Queued {
    uint64_t line;
    int64_t weight;
  };
  // Per stream (operand x direction x core, see dram()): queued write-backs, oldest first.
  std::vector<std::vector<Queued>> write_queue_;
  Traffic t_;
};

}  // namespace bertlab::hw
