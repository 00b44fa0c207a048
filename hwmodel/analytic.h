#pragma once
// Analytic (closed-form) traffic of the schedules in work.h: cost per node independent of
// the number of accesses, so a whole training graph is estimated in milliseconds.
//
// Cache model: an operand's line is re-used from the cache when the distinct lines the
// schedule touches between two uses (its reuse window) do not overflow its LLC set (LRU
// stack distance per set, setload.h; one set: the capacity test); otherwise it is fetched
// again at that reuse. DRAM: every fetch and every dirty
// line is one line transfer; row-buffer misses of a request stream are the DRAM rows its
// sweeps enter (distinct_blocks with the row size), less one when a sweep starts in the
// row the previous sweep of the same stream ended in. tracesim.h enumerates the same
// schedules exactly; tests/test_hwmodel_sim.cpp checks the two agree.
#include "hwmodel/system.h"
#include "hwmodel/work.h"

namespace bertlab::hw {

Traffic analytic_traffic(const GemmWork& w, const SystemDesc& s, int64_t cores);
Traffic analytic_traffic(const StreamWork& w, const SystemDesc& s, int64_t cores);
Traffic analytic_traffic(const RowWork& w, const SystemDesc& s, int64_t cores);

}  // namespace bertlab::hw
