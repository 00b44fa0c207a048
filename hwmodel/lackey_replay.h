#pragma once
// Replays memory-address traces, one per core, into the exact cache and DRAM simulator
// (tracesim.h): private L1s, a shared LLC, the DRAM request streams. Two trace formats hold
// the same events (instructions; loads, stores and modifies with address and size; the
// program's stderr lines): the text log of valgrind's lackey (`--trace-mem=yes --log-fd=2`),
// and the binary trace of bertlab's valgrind tool hwtrace (hwmodel/reference/valgrind/
// hw_main.c, which describes the format), far cheaper to write and to read (measured in
// docs/hwmodel.md, "Agreement"). The traced program (the reference driver, hwmodel/reference/)
// prints
//   #hwref region=<hex> bytes=<n> marker=<hex>
// (and optionally ` warm=<hex>`) before its kernel and stores to the marker address right
// before and right after it; only the accesses and instructions between the two stores are
// counted. The caches are simulated from the store to the warm address on (a warm-up that
// touches the kernel's stack and tables, not its operands); at the first marker store each
// core waits until all have reached theirs, then the counts restart from zero. Addresses inside the
// region are moved to kRegionBase (the operands of every core's process then coincide, as
// in one shared address space); others (stack) stay private per core.
#include <cstdint>
#include <istream>
#include <map>
#include <streambuf>
#include <string>
#include <vector>

#include "base/enum_table.h"
#include "hwmodel/encoder_layer.h"
#include "hwmodel/system.h"
#include "hwmodel/work.h"

namespace bertlab::hw {

struct ReplayResult {
  std::vector<int64_t> instructions;  // per core, between the markers
  Traffic traffic;                    // l1_misses, llc_misses per core; DRAM lines per operand
  // Per core: the lines outside the operands (the kernel's stack, tables) touched between the
  // markers, line address -> accesses; what the core model's stack stream (core_model.h) is
  // measured from.
  std::vector<std::map<uint64_t, int64_t>> other_lines;
};

// A trace file or FIFO, read in 1 MB blocks (an std::streambuf for replay_traces). lackey
// writes its trace one line per write() (hwtrace in 1 MB blocks, for which the wait below costs
// nothing); a reader that wakes for each line spends more CPU time in the kernel than lackey
// itself (measured: docs/hwmodel.md, "Agreement"). So a FIFO's buffer is enlarged to 1 MB
// and, while less than a quarter of it is filled, the reader sleeps 1 ms instead of blocking
// in read(): lackey's writes then land in the pipe without waking anyone.
//
// A FIFO is opened without blocking (a blocking open waits for a writer forever, so a tracer
// that fails to start would hang the replay), then waits until its writer has written or
// closed it; it fails, naming the FIFO, when the writer process `writer` (0: not known) has
// exited first, or after `timeout_s` seconds without a writer.
class TraceReader : public std::streambuf {
 public:
  explicit TraceReader(const std::string& path, int64_t writer = 0, double timeout_s = 120);
  ~TraceReader() override;
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

 protected:
  int_type underflow() override;

 private:
  void wait_for_writer(int64_t writer, double timeout_s);
  std::string path_;
  std::vector<char> buf_;
  int fd_ = -1;
  bool fifo_ = false;
};

// Whether process `pid` runs (exists and is not a zombie: a writer that exited but was not yet
// reaped by its parent counts as exited).
bool process_running(int64_t pid);

#define BERTLAB_TRACE_FORMATS(X) X(lackey, "lackey") X(hwtrace, "hwtrace")
BERTLAB_ENUM(TraceFormat, uint8_t, BERTLAB_TRACE_FORMATS)

// The cores advance in lock step, one instruction each per round (equal-speed in-order
// cores). `operands` names the region's buffers (their DRAM streams); accesses outside them
// belong to the operand "other" (the stack: spilled locals), or are left out when
// `operands_only` (what the schedule itself touches, as the core model sees it).
//
// `dump` (a file or FIFO path; empty: none): every access handed to the simulator, in the
// order it gets them, for an independent cache simulator (tests/reference/cache_sim.py,
// docs/hwmodel-cache-check.md). Format, little-endian: the 8 bytes "BLACCES1", a uint64 n,
// n bytes of JSON {"cores": P, "operands": [names by id], "record_bytes": 16} padded with
// spaces to a multiple of 16; then 16-byte records: uint64 address (as simulated: region
// addresses moved to kRegionBase, others offset by (core + 1) << 44), uint32 bytes, uint8
// core, uint8 flags (1: write, i.e. a store or modify; 2: modify; 4: the counts restart here,
// the warm-up ends; 8: end of the trace), uint16 operand id. A restart or end record has no
// access (address, bytes, core and operand 0).
inline constexpr char kAccessDumpMagic[9] = "BLACCES1";
ReplayResult replay_traces(const std::vector<std::istream*>& traces, TraceFormat format, const SystemDesc& s,
                           const std::vector<Operand>& operands, bool operands_only = false,
                           const std::string& dump = {});
inline ReplayResult replay_lackey(const std::vector<std::istream*>& traces, const SystemDesc& s,
                                  const std::vector<Operand>& operands, bool operands_only = false) {
  return replay_traces(traces, TraceFormat::lackey, s, operands, operands_only);
}

}  // namespace bertlab::hw
