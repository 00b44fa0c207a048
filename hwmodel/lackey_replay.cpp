#include "hwmodel/lackey_replay.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <unordered_map>

#include "hwmodel/tracesim.h"
#include "base/error.h"

namespace bertlab::hw {

bool process_running(int64_t pid) {
  // /proc/PID/stat: "PID (COMM) STATE ..."; COMM may hold spaces and parentheses.
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  if (!std::getline(f, stat)) return false;
  const auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  const char state = stat[close + 2];
  return state != 'Z' && state != 'X' && state != 'x';
}

TraceReader::TraceReader(const std::string& path, int64_t writer, double timeout_s)
    : path_(path), buf_(size_t{1} << 20) {
  struct stat st {};
  check(::stat(path.c_str(), &st) == 0, "replay: cannot open trace '{}': {}", path, std::strerror(errno));
  fifo_ = S_ISFIFO(st.st_mode);
  fd_ = ::open(path.c_str(), fifo_ ? O_RDONLY | O_NONBLOCK : O_RDONLY);
  check(fd_ >= 0, "replay: cannot open trace '{}': {}", path, std::strerror(errno));
  if (!fifo_) return;
  ::fcntl(fd_, F_SETPIPE_SZ, static_cast<int>(buf_.size()));  // best effort (pipe-max-size)
  try {
    wait_for_writer(writer, timeout_s);
  } catch (...) {
    ::close(fd_);
    throw;
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);  // from here on, read() waits for data
}

TraceReader::~TraceReader() { ::close(fd_); }

void TraceReader::wait_for_writer(int64_t writer, double timeout_s) {
  // Until the FIFO has data or a writer that closed it (POLLHUP: Linux reports it only once a
  // writer has come and gone, not while none has opened the FIFO yet).
  const auto start = std::chrono::steady_clock::now();
  auto ready = [&](int wait_ms) {
    pollfd p{fd_, POLLIN, 0};
    int n;
    do n = ::poll(&p, 1, wait_ms);
    while (n < 0 && errno == EINTR);
    check(n >= 0, "replay: cannot wait for trace FIFO '{}': {}", path_, std::strerror(errno));
    return n > 0 && (p.revents & (POLLIN | POLLHUP)) != 0;
  };
  while (!ready(50)) {
    // Exited between two polls: what it wrote before is in the FIFO (poll once more).
    if (writer > 0 && !process_running(writer) && !ready(0))
      fail("replay: the writer of trace FIFO '{}' (process {}) exited without opening it (did the tracer fail to "
           "start? see its log)",
           path_, writer);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    check(waited < timeout_s, "replay: no writer opened trace FIFO '{}' within {} s (did the tracer fail to start?)",
          path_, timeout_s);
  }
}

TraceReader::int_type TraceReader::underflow() {
  if (fifo_) {
    for (int waited = 0; waited < 100; ++waited) {  // at most 0.1 s, then block in read()
      int avail = 0;
      if (::ioctl(fd_, FIONREAD, &avail) != 0 || avail >= static_cast<int>(buf_.size() / 4)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ssize_t n;
  do n = ::read(fd_, buf_.data(), buf_.size());
  while (n < 0 && errno == EINTR);
  check(n >= 0, "replay: cannot read trace '{}': {}", path_, std::strerror(errno));
  if (n == 0) return traits_type::eof();
  setg(buf_.data(), buf_.data(), buf_.data() + n);
  return traits_type::to_int_type(buf_[0]);
}

namespace {

// One event of a core's trace: a run of instructions, a data access, or a '#hwref' line.
struct TraceEvent {
  enum class Kind { instructions, data, hwref };
  Kind kind = Kind::instructions;
  int64_t count = 0;  // instructions
  char access = 'L';  // data: 'L' load, 'S' store, 'M' modify (load and store)
  uint64_t addr = 0;
  int64_t size = 0;
  const std::string* line = nullptr;  // hwref
};

bool is_hwref(const std::string& line) { return line.size() > 6 && line.compare(0, 6, "#hwref") == 0; }

// lackey's log: "I  addr,size" per instruction, " L addr,size" (S, M) per data access; the
// program's '#hwref' line (same fd); valgrind's own '==pid==' lines are skipped.
class LackeyReader {
 public:
  explicit LackeyReader(std::istream& in) : in_(in) {}
  bool next(TraceEvent& e) {
    while (std::getline(in_, line_)) {
      if (line_[0] == '#' && is_hwref(line_)) {
        e.kind = TraceEvent::Kind::hwref, e.line = &line_;
        return true;
      }
      if (line_.size() < 4) continue;
      if (line_[0] == 'I' && line_[1] == ' ') {
        e.kind = TraceEvent::Kind::instructions, e.count = 1;
        return true;
      }
      if (line_[0] != ' ' || (line_[1] != 'L' && line_[1] != 'S' && line_[1] != 'M') || line_[2] != ' ') continue;
      char* end = nullptr;
      e.kind = TraceEvent::Kind::data, e.access = line_[1];
      e.addr = std::strtoull(line_.c_str() + 3, &end, 16);
      e.size = (end && *end == ',') ? std::strtoll(end + 1, nullptr, 10) : 1;
      return true;
    }
    return false;
  }

 private:
  std::istream& in_;
  std::string line_;
};

// hwtrace's binary trace (format: hwmodel/reference/valgrind/hw_main.c): records of 64-bit
// words, each carrying the instructions executed before it.
class HwtraceReader {
 public:
  HwtraceReader(std::istream& in, int64_t core) : in_(in), buf_(size_t{1} << 13) {
    char magic[8] = {};
    in_.read(magic, 8);
    check(in_.gcount() == 8 && std::memcmp(magic, "HWTRACE1", 8) == 0,
          "hwtrace replay: the trace of core {} is not an hwtrace file (no 'HWTRACE1' header)", core);
  }
  bool next(TraceEvent& e) {
    for (;;) {
      if (instructions_ > 0) {
        e.kind = TraceEvent::Kind::instructions, e.count = instructions_;
        instructions_ = 0;
        return true;
      }
      if (has_data_) {
        has_data_ = false;
        e.kind = TraceEvent::Kind::data, e.access = access_, e.addr = addr_, e.size = size_;
        return true;
      }
      if (!lines_.empty()) {
        line_ = std::move(lines_.front());
        lines_.pop_front();
        e.kind = TraceEvent::Kind::hwref, e.line = &line_;
        return true;
      }
      uint64_t h = 0;
      if (!word(h)) return false;
      const uint64_t kind = h & 3, size = (h >> 2) & 0x3fff;
      instructions_ = static_cast<int64_t>(h >> 16);
      if (kind == 0) {
        text(size);
        continue;
      }
      check(word(addr_), "hwtrace replay: a trace ends inside a record");
      has_data_ = true, access_ = "?LSM"[kind], size_ = static_cast<int64_t>(size);
    }
  }

 private:
  bool word(uint64_t& w) {
    if (at_ == end_) {
      in_.read(reinterpret_cast<char*>(buf_.data()), static_cast<std::streamsize>(buf_.size() * 8));
      const auto n = in_.gcount();
      check(n % 8 == 0, "hwtrace replay: a trace ends inside a word");
      at_ = 0, end_ = static_cast<size_t>(n / 8);
      if (end_ == 0) return false;
    }
    w = buf_[at_++];
    return true;
  }
  // The program's stderr bytes: complete '#hwref' lines are queued, others dropped.
  void text(uint64_t bytes) {
    for (uint64_t i = 0; i < bytes; i += 8) {
      uint64_t w = 0;
      check(word(w), "hwtrace replay: a trace ends inside a text record");
      char c[8];
      std::memcpy(c, &w, 8);
      for (uint64_t k = 0; k < 8 && i + k < bytes; ++k) {
        if (c[k] != '\n') {
          partial_ += c[k];
          continue;
        }
        if (is_hwref(partial_)) lines_.push_back(partial_);
        partial_.clear();
      }
    }
  }

  std::istream& in_;
  std::vector<uint64_t> buf_;
  size_t at_ = 0, end_ = 0;
  int64_t instructions_ = 0;
  bool has_data_ = false;
  char access_ = 'L';
  uint64_t addr_ = 0;
  int64_t size_ = 0;
  std::string partial_, line_;
  std::deque<std::string> lines_;
};

struct CoreTrace {
  uint64_t base = 0, bytes = 0, marker = 0, warm = 0;
  bool mapped = false, warming = false, counting = false, started = false, waiting = false, done = false;
  int64_t instructions = 0;
  int64_t instructions_left = 0;  // of the current run of instructions
  std::unordered_map<uint64_t, int64_t> other_lines;  // between the markers
};

uint64_t field(const std::string& line, const char* key, bool required = true) {
  const auto at = line.find(key);
  check(at != std::string::npos || !required, "trace replay: '#hwref' line without '{}': {}", key, line);
  return at == std::string::npos ? 0 : std::strtoull(line.c_str() + at + std::char_traits<char>::length(key), nullptr, 0);
}

// The accesses handed to the simulator, written to a file (format: lackey_replay.h).
class AccessDump {
 public:
  AccessDump(const std::string& path, int64_t cores, const std::vector<std::string>& names) : path_(path) {
    if (path.empty()) return;
    check(cores <= 255, "replay: the access dump holds at most 255 cores, got {}", cores);
    f_ = std::fopen(path.c_str(), "wb");
    check(f_ != nullptr, "replay: cannot write the access dump '{}': {}", path, std::strerror(errno));
    std::setvbuf(f_, nullptr, _IOFBF, size_t{1} << 20);
    std::string json = fmt::format(R"({{"cores": {}, "record_bytes": 16, "operands": [)", cores);
    for (size_t i = 0; i < names.size(); ++i) json += fmt::format(R"({}"{}")", i ? ", " : "", names[i]);
    json += "]}";
    json.resize((json.size() + 15) / 16 * 16, ' ');
    const uint64_t n = json.size();
    put(kAccessDumpMagic, 8), put(&n, 8), put(json.data(), json.size());
  }
  ~AccessDump() {
    if (f_) std::fclose(f_);
  }
  AccessDump(const AccessDump&) = delete;
  AccessDump& operator=(const AccessDump&) = delete;
  void access(int64_t core, int operand, uint64_t addr, int64_t bytes, bool write, bool modify) {
    if (f_) record(addr, static_cast<uint32_t>(bytes), static_cast<uint8_t>(core), (write ? 1 : 0) | (modify ? 2 : 0),
                   static_cast<uint16_t>(operand));
  }
  void restart() {
    if (f_) record(0, 0, 0, 4, 0);
  }
  void end() {
    if (!f_) return;
    record(0, 0, 0, 8, 0);
    const bool ok = std::fclose(f_) == 0;
    f_ = nullptr;
    check(ok, "replay: cannot write the access dump '{}': {}", path_, std::strerror(errno));
  }

 private:
  void put(const void* p, size_t n) {
    check(std::fwrite(p, 1, n, f_) == n, "replay: cannot write the access dump '{}': {}", path_, std::strerror(errno));
  }
  void record(uint64_t addr, uint32_t bytes, uint8_t core, int flags, uint16_t operand) {
    unsigned char r[16];
    const auto f = static_cast<uint8_t>(flags);
    std::memcpy(r, &addr, 8), std::memcpy(r + 8, &bytes, 4), std::memcpy(r + 12, &core, 1);
    std::memcpy(r + 13, &f, 1), std::memcpy(r + 14, &operand, 2);
    put(r, 16);
  }
  std::string path_;
  std::FILE* f_ = nullptr;
};

template <class Reader>
ReplayResult replay(std::vector<Reader>& readers, const SystemDesc& s, const std::vector<Operand>& operands,
                    bool operands_only, const std::string& dump_path) {
  const int64_t P = static_cast<int64_t>(readers.size());
  TraceSim sim(s, P);
  std::vector<int> ids;
  std::vector<std::string> names;
  for (const auto& o : operands) ids.push_back(sim.operand(o.name));
  const int other = sim.operand("other");
  // Operand ids are given in order from 0 (TraceSim::operand): the names by id.
  for (const auto& o : operands)
    if (std::find(names.begin(), names.end(), o.name) == names.end()) names.push_back(o.name);
  names.push_back("other");
  check(static_cast<int>(names.size()) == other + 1, "replay: unexpected operand ids");
  AccessDump dump(dump_path, P, names);
  std::vector<CoreTrace> cores(P);
  // One data access of core c: map the address, find its operand, simulate.
  auto data = [&](int64_t c, CoreTrace& t, char kind, uint64_t addr, int64_t size) {
    if (t.mapped && addr == t.marker) {
      t.counting = !t.counting;
      // The first marker store: the core waits there until every core has reached its own.
      if (t.counting && !t.started) t.started = t.waiting = true;
      return;
    }
    if (t.mapped && t.warm != 0 && addr == t.warm) {
      t.warming = true;
      return;
    }
    if (!t.counting && !(t.warming && !t.started)) return;
    uint64_t a = addr + (static_cast<uint64_t>(c + 1) << 44);
    int op = other;
    if (t.mapped && addr >= t.base && addr < t.base + t.bytes) {
      const uint64_t off = addr - t.base;
      a = kRegionBase + off;
      for (size_t i = 0; i < operands.size(); ++i)
        if (off >= static_cast<uint64_t>(operands[i].offset) &&
            off < static_cast<uint64_t>(operands[i].offset + operands[i].bytes))
          op = ids[i];
    }
    if (op == other && t.counting) ++t.other_lines[addr / static_cast<uint64_t>(s.l1.line_bytes)];
    if (op == other && operands_only) return;
    sim.access(c, op, a, size, kind != 'L');  // 'S' store, 'M' modify (load and store)
    dump.access(c, op, a, size, kind != 'L', kind == 'M');
  };
  // Advances core c by one instruction (or to the end of its trace).
  TraceEvent e;
  auto step = [&](int64_t c) {
    CoreTrace& t = cores[c];
    for (;;) {
      if (t.instructions_left > 0) {
        --t.instructions_left;
        if (t.counting) ++t.instructions;
        return;
      }
      if (!readers[c].next(e)) break;
      switch (e.kind) {
        case TraceEvent::Kind::instructions:
          t.instructions_left = e.count;
          break;
        case TraceEvent::Kind::hwref:
          t.base = field(*e.line, "region=");
          t.bytes = field(*e.line, "bytes=");
          t.marker = field(*e.line, "marker=");
          t.warm = field(*e.line, "warm=", false);
          t.mapped = true;
          break;
        case TraceEvent::Kind::data:
          data(c, t, e.access, e.addr, e.size);
          if (t.waiting) return;
          break;
      }
    }
    t.done = true;
  };
  for (int64_t live = P; live > 0;) {
    // Rounds in which every running core only executes instructions (binary traces give
    // their runs at once): skipped together, the interleaving of the accesses is unchanged.
    int64_t skip = -1;
    for (const auto& t : cores)
      if (!t.done && !t.waiting) skip = skip < 0 ? t.instructions_left : std::min(skip, t.instructions_left);
    if (skip > 0)
      for (auto& t : cores)
        if (!t.done && !t.waiting) {
          t.instructions_left -= skip;
          if (t.counting) t.instructions += skip;
        }
    live = 0;
    int64_t waiting = 0;
    for (int64_t c = 0; c < P; ++c) {
      if (cores[c].done) continue;
      if (!cores[c].waiting) step(c);
      live += cores[c].done ? 0 : 1;
      waiting += !cores[c].done && cores[c].waiting ? 1 : 0;
    }
    // Every core at its start marker: the kernels start together on warm caches; what the
    // warm-up (from the store to `warm=` on) brought in stays, its counts are dropped.
    if (live > 0 && waiting == live) {
      sim.reset_counts();
      dump.restart();
      for (auto& t : cores) t.waiting = false;
    }
  }
  ReplayResult r;
  for (const auto& t : cores) {
    check(t.mapped, "trace replay: a trace has no '#hwref region=... marker=...' line");
    r.instructions.push_back(t.instructions);
    r.other_lines.emplace_back(t.other_lines.begin(), t.other_lines.end());
  }
  r.traffic = sim.finish();
  dump.end();
  return r;
}

}  // namespace

ReplayResult replay_traces(const std::vector<std::istream*>& traces, TraceFormat format, const SystemDesc& s,
                           const std::vector<Operand>& operands, bool operands_only, const std::string& dump) {
  check(!traces.empty(), "trace replay: no traces");
  switch (format) {
    case TraceFormat::lackey: {
      std::vector<LackeyReader> readers;
      for (auto* in : traces) readers.emplace_back(*in);
      return replay(readers, s, operands, operands_only, dump);
    }
    case TraceFormat::hwtrace: {
      std::vector<HwtraceReader> readers;
      readers.reserve(traces.size());
      for (size_t c = 0; c < traces.size(); ++c) readers.emplace_back(*traces[c], static_cast<int64_t>(c));
      return replay(readers, s, operands, operands_only, dump);
    }
  }
  fail("trace replay: unknown trace format");
}

}  // namespace bertlab::hw
