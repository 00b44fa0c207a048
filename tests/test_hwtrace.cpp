// hwtrace, the binary memory tracer of the reference replay (hwmodel/reference/valgrind/
// hw_main.c), against valgrind's lackey: the same events, so the same ReplayResult
// (hwmodel/lackey_replay.h), and the same instruction count as cachegrind's Ir.
#include <fmt/core.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "hwmodel/lackey_replay.h"
#include "hwmodel/system.h"

using namespace bertlab::hw;

namespace {

// One record of the binary format, written here from the format's description.
void put_word(std::string& s, uint64_t w) {
  char b[8];
  std::memcpy(b, &w, 8);
  s.append(b, 8);
}
void put_data(std::string& s, int64_t instructions, int kind, uint64_t addr, int64_t size) {
  put_word(s, static_cast<uint64_t>(kind) | static_cast<uint64_t>(size) << 2 | static_cast<uint64_t>(instructions) << 16);
  put_word(s, addr);
}
void put_text(std::string& s, int64_t instructions, const std::string& text) {
  put_word(s, static_cast<uint64_t>(text.size()) << 2 | static_cast<uint64_t>(instructions) << 16);
  std::string padded = text;
  padded.resize((text.size() + 7) / 8 * 8, '\0');
  s += padded;
}

void check_same(const ReplayResult& a, const ReplayResult& b) {
  CHECK(a.instructions == b.instructions);
  CHECK(a.traffic.l1_misses == b.traffic.l1_misses);
  CHECK(a.traffic.llc_misses == b.traffic.llc_misses);
  REQUIRE(a.traffic.operands.size() == b.traffic.operands.size());
  for (const auto& [name, o] : a.traffic.operands) {
    INFO("operand " << name);
    REQUIRE(b.traffic.operands.count(name) == 1);
    const auto& p = b.traffic.operands.at(name);
    CHECK(o.read_lines == p.read_lines);
    CHECK(o.write_lines == p.write_lines);
    CHECK(o.row_misses == p.row_misses);
  }
  CHECK(a.other_lines == b.other_lines);
}

extern "C" char** environ;

// Starts `/bin/sh -c cmd` in the background; its process id.
pid_t spawn_shell(const std::string& cmd) {
  pid_t pid = 0;
  const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  REQUIRE(::posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) == 0);
  return pid;
}
int reap(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

SystemDesc hand_system() {
  SystemDesc s;
  s.l1 = {128, 2, 64, 2, false};    // one set of two lines per core
  s.llc = {256, 4, 64, 20, false};  // one set of four lines, shared
  s.dram.row_bytes = 1024, s.dram.banks = 8, s.dram.burst_bytes = 64, s.dram.peak_gbps = 10;
  return s;
}

}  // namespace

TEST_CASE("hwtrace replay: a binary trace gives what the lackey text of the same events gives", "[hwmodel-reference]") {
  // Core 0 runs its instructions in batches (several per record), core 1 one at a time; the
  // '#hwref' line arrives split over two stderr writes, after a line that is not one.
  const std::string hwref = "#hwref region=0x1000 bytes=4096 marker=0x9000 warm=0xa000\n";
  std::istringstream lk0("==1== Lackey\n" + hwref +
                         "I  0400000,4\n S a000,8\n I 0,0\nI  0400004,4\n L 30000,4\nI  0400008,4\n"
                         "I  040000c,4\n S 9000,8\nI  0400010,4\nI  0400014,4\n L 1000,4\nI  0400018,4\n"
                         " M 1040,4\nI  040001c,4\n L 30000,4\n S 9000,8\nI  0400020,4\nI  0400024,4\n");
  std::istringstream lk1(hwref + " S a000,8\n L 30040,4\nI  0400000,4\n S 9000,8\nI  0400004,4\n L 1000,4\n"
                                 "I  0400008,4\n S 1080,8\nI  040000c,4\n S 9000,8\nI  0400010,4\n");
  std::string b0 = "HWTRACE1", b1 = "HWTRACE1";
  put_text(b0, 0, "another line\n#hwref region=0x1000 ");
  put_text(b0, 0, "bytes=4096 marker=0x9000 warm=0xa000\n");
  put_data(b0, 1, 2, 0xa000, 8);
  put_data(b0, 1, 1, 0x30000, 4);
  put_data(b0, 2, 2, 0x9000, 8);
  put_data(b0, 2, 1, 0x1000, 4);
  put_data(b0, 1, 3, 0x1040, 4);
  put_data(b0, 1, 1, 0x30000, 4);
  put_data(b0, 0, 2, 0x9000, 8);
  put_text(b0, 2, "");
  put_text(b1, 0, hwref);
  put_data(b1, 0, 2, 0xa000, 8);
  put_data(b1, 0, 1, 0x30040, 4);
  put_data(b1, 1, 2, 0x9000, 8);
  put_data(b1, 1, 1, 0x1000, 4);
  put_data(b1, 1, 2, 0x1080, 8);
  put_data(b1, 1, 2, 0x9000, 8);
  put_text(b1, 1, "");
  std::istringstream hw0(b0), hw1(b1);
  const SystemDesc s = hand_system();
  const std::vector<Operand> ops{{"a", 64, 0}, {"b", 64, 64}, {"c", 64, 128}};
  const auto lackey = replay_traces({&lk0, &lk1}, TraceFormat::lackey, s, ops);
  const auto hw = replay_traces({&hw0, &hw1}, TraceFormat::hwtrace, s, ops);
  CHECK(lackey.instructions == std::vector<int64_t>{4, 3});
  CHECK(lackey.traffic.operands.at("b").write_lines == 1);  // the modify
  check_same(lackey, hw);
}

TEST_CASE("hwtrace replay: a file that is not an hwtrace trace is refused, naming the core", "[hwmodel-reference]") {
  std::istringstream text("==1== Lackey\nI  0400000,4\n");
  std::istringstream good("HWTRACE1");
  try {
    replay_traces({&good, &text}, TraceFormat::hwtrace, hand_system(), {});
    FAIL("accepted");
  } catch (const std::exception& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("core 1") && Catch::Contains("HWTRACE1"));
  }
  std::string cut = "HWTRACE1";
  put_word(cut, 1 | 4 << 2);  // a load without its address word
  std::istringstream truncated(cut);
  CHECK_THROWS_WITH(replay_traces({&truncated}, TraceFormat::hwtrace, hand_system(), {}),
                    Catch::Contains("ends inside a record"));
}

// A tracer that fails to start never opens its FIFO; a blocking open() of the FIFO would wait
// for it forever. The replay's reader (TraceReader) fails instead, naming the FIFO.
TEST_CASE("replay: a trace FIFO whose writer exits without opening it is a clear error, not a hang",
          "[hwmodel-reference]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("bertlab_fifo_{}", ::getpid());
  fs::create_directories(dir);
  const std::string fifo = (dir / "core0").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  SECTION("the writer dies at once (not reaped yet: a zombie counts as exited)") {
    const pid_t writer = spawn_shell("exit 3");
    const auto start = std::chrono::steady_clock::now();
    try {
      TraceReader r(fifo, writer, 60);
      std::istream in(&r);
      replay_traces({&in}, TraceFormat::hwtrace, hand_system(), {});
      FAIL("the replay ran without a writer");
    } catch (const std::exception& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK_THAT(what, Catch::Contains(fifo) && Catch::Contains(fmt::format("process {}", writer)) &&
                           Catch::Contains("exited without opening it"));
    }
    CHECK(seconds_since(start) < 10);  // detected, not the 60 s timeout
    CHECK(WEXITSTATUS(reap(writer)) == 3);
  }
  SECTION("no writer known: the timeout") {
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(TraceReader(fifo, 0, 0.3), Catch::Contains(fifo) && Catch::Contains("within 0.3 s"));
    const double waited = seconds_since(start);
    CHECK(waited >= 0.3);
    CHECK(waited < 10);
  }
  SECTION("a writer that opens the FIFO late is waited for, and its trace replays as from memory") {
    const std::string hwref = "#hwref region=0x1000 bytes=4096 marker=0x9000 warm=0xa000\n";
    const std::string text = hwref + " S a000,8\n L 30040,4\nI  0400000,4\n S 9000,8\nI  0400004,4\n L 1000,4\n"
                                     "I  0400008,4\n S 1080,8\nI  040000c,4\n S 9000,8\nI  0400010,4\n";
    std::ofstream((dir / "trace.txt").string()) << text;
    const pid_t writer = spawn_shell(fmt::format("sleep 0.3; cat {} > {}", (dir / "trace.txt").string(), fifo));
    const std::vector<Operand> ops{{"a", 64, 0}, {"b", 64, 64}, {"c", 64, 128}};
    ReplayResult fed;
    {
      TraceReader r(fifo, writer, 60);
      std::istream in(&r);
      fed = replay_traces({&in}, TraceFormat::lackey, hand_system(), ops);
    }
    CHECK(WEXITSTATUS(reap(writer)) == 0);
    std::istringstream mem(text);
    const auto direct = replay_traces({&mem}, TraceFormat::lackey, hand_system(), ops);
    CHECK(fed.instructions == std::vector<int64_t>{3});
    check_same(fed, direct);
  }
  SECTION("a missing trace file names the path") {
    CHECK_THROWS_WITH(TraceReader((dir / "none").string()), Catch::Contains((dir / "none").string()));
  }
  fs::remove_all(dir);
}

#ifdef BERTLAB_HWTRACE_LIB

namespace {

namespace fs = std::filesystem;

fs::path kernel_binary() { return fs::path(BERTLAB_BINARY).parent_path() / "bertlab_hwref_kernel"; }

// The replay of one op's traces on `cores` cores (one valgrind process per core writing into a
// FIFO, as scripts/hwmodel_reference.sh runs them), under lackey or hwtrace. Both run from
// the build's VALGRIND_LIB, so that the program sees the same environment (stack addresses).
ReplayResult traced_replay(TraceFormat format, const std::string& op, const std::string& arr, int64_t seq, int64_t S,
                           int64_t cores) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("bertlab_hwtrace_{}", ::getpid());
  fs::create_directories(dir);
  std::vector<pid_t> tracers;  // run on in the background; the readers fail if one exits without opening its FIFO
  for (int64_t c = 0; c < cores; ++c) {
    const std::string fifo = (dir / fmt::format("core{}", c)).string();
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    const std::string args = fmt::format("{} {} {} {} {} {} {}", kernel_binary().string(), op, arr, seq, S, cores, c);
    tracers.push_back(spawn_shell(
        format == TraceFormat::hwtrace
            ? fmt::format("VALGRIND_LIB={} exec valgrind -q --tool=hwtrace --trace-file={} {} >/dev/null 2>&1",
                          BERTLAB_HWTRACE_LIB, fifo, args)
            : fmt::format("VALGRIND_LIB={} exec valgrind --tool=lackey --trace-mem=yes --log-fd=2 {} 2>{} >/dev/null",
                          BERTLAB_HWTRACE_LIB, args, fifo)));
  }
  SystemDesc s = load_system(std::string(BERTLAB_SOURCE_DIR) + "/configs/systems/paper-ticsat.json");
  s.operand_offset_bytes = 0, s.qkv = QkvSchedule::fused;  // the reference kernels: page-aligned buffers, fused qkv
  s.cores = cores, s.array.kernel = S;
  LayerDims d;
  d.seq = seq;
  ReplayResult r;
  {
    std::vector<std::unique_ptr<TraceReader>> readers;
    std::vector<std::unique_ptr<std::istream>> streams;
    std::vector<std::istream*> in;
    for (int64_t c = 0; c < cores; ++c) {
      readers.push_back(std::make_unique<TraceReader>((dir / fmt::format("core{}", c)).string(), tracers[c], 120));
      streams.push_back(std::make_unique<std::istream>(readers.back().get()));
      in.push_back(streams.back().get());
    }
    r = replay_traces(in, format, s, op_operands(layer_op_from_string(op), d));
  }
  for (const pid_t t : tracers) CHECK(WEXITSTATUS(reap(t)) == 0);
  fs::remove_all(dir);
  return r;
}

void check_equivalent(const std::string& op, int64_t seq, int64_t S, int64_t cores, const std::string& arr) {
  INFO(fmt::format("{} {} seq {} S {} on {} cores", op, arr, seq, S, cores));
  const auto lackey = traced_replay(TraceFormat::lackey, op, arr, seq, S, cores);
  const auto hw = traced_replay(TraceFormat::hwtrace, op, arr, seq, S, cores);
  REQUIRE(lackey.instructions.size() == static_cast<size_t>(cores));
  for (int64_t c = 0; c < cores; ++c) CHECK(lackey.instructions[c] > 1000);  // the kernel ran
  check_same(lackey, hw);
}

// All instructions of an hwtrace file (the sum of the records' counts), read apart from the
// replay's reader.
int64_t trace_instructions(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[8];
  f.read(magic, 8);
  REQUIRE(std::string(magic, 8) == "HWTRACE1");
  int64_t n = 0;
  uint64_t h = 0, skip = 0;
  while (f.read(reinterpret_cast<char*>(&h), 8)) {
    n += static_cast<int64_t>(h >> 16);
    skip = (h & 3) != 0 ? 8 : (((h >> 2) & 0x3fff) + 7) / 8 * 8;
    f.seekg(static_cast<std::streamoff>(skip), std::ios::cur);
  }
  return n;
}

}  // namespace

// The default suite's instance (lackey takes a few CPU seconds per process); the hidden
// tests below run the whole matrix.
TEST_CASE("hwtrace under valgrind: the two-core replay equals lackey's on K transpose", "[hwmodel-reference][valgrind]") {
  check_equivalent("k_transpose", 32, 4, 2, "bwma");
}

TEST_CASE("hwtrace under valgrind: the replay equals lackey's on small ops", "[.reference]") {
  for (const char* arr : {"rwma", "bwma"})
    for (int64_t cores : {1, 2})
      for (int64_t S : {4, 32}) {
        check_equivalent("k_transpose", 32, S, cores, arr);
        check_equivalent("scores", 32, S, cores, arr);
      }
}

TEST_CASE("hwtrace under valgrind: the replay equals lackey's on the attention-output GEMM", "[.reference]") {
  for (const char* arr : {"rwma", "bwma"})
    for (int64_t cores : {1, 2})
      for (int64_t S : {4, 32}) check_equivalent("attn_out", 32, S, cores, arr);
}

TEST_CASE("hwtrace under valgrind: its instruction count is cachegrind's Ir", "[hwmodel-reference][valgrind]") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("bertlab_hwtrace_ir_{}", ::getpid());
  fs::create_directories(dir);
  const std::string args = fmt::format("{} k_transpose bwma 32 8 1 0", kernel_binary().string());
  const std::string cmd = fmt::format(
      "VALGRIND_LIB={0} valgrind -q --tool=hwtrace --trace-file={1}/trace {2} >/dev/null 2>&1 && "
      "VALGRIND_LIB={0} valgrind -q --tool=cachegrind --cache-sim=no --cachegrind-out-file={1}/cg {2} "
      ">/dev/null 2>&1",
      BERTLAB_HWTRACE_LIB, dir.string(), args);
  REQUIRE(std::system(cmd.c_str()) == 0);
  // cachegrind's whole-program total: "summary: IR".
  std::ifstream cg(dir / "cg");
  std::string line;
  int64_t ir = -1;
  while (std::getline(cg, line))
    if (line.rfind("summary:", 0) == 0) ir = std::stoll(line.substr(8));
  const int64_t traced = trace_instructions(dir / "trace");
  INFO(fmt::format("hwtrace {} instructions, cachegrind Ir {}", traced, ir));
  CHECK(ir > 100000);
  CHECK(traced == ir);
  fs::remove_all(dir);
}

#endif  // BERTLAB_HWTRACE_LIB
