// bertlab_hwref: the tools around the reference of the arrangement estimate (docs/hwmodel.md,
// "Reference"; the kernels run under valgrind are bertlab_hwref_kernel, kernel_main.cpp).
// Subcommands:
//   replay  memory traces (lackey's text log or hwtrace's binary trace, one file or FIFO per
//           core) into the exact cache/DRAM simulator
//   model   the in-order core model's counts for the same op (core_model.h)
//   table   the paper table with the time broken down per region (core model, seq 512)
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <fmt/core.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <streambuf>
#include <thread>
#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "hwmodel/core_model.h"
#include "hwmodel/lackey_replay.h"
#include "base/error.h"

namespace {

using namespace bertlab;
using namespace bertlab::hw;

Arrangement parse_arrangement(const std::string& s) {
  if (s == "rwma") return Arrangement::rwma;
  if (s == "bwma") return Arrangement::bwma;
  fail("--arrangement: expected rwma or bwma, got '{}'", s);
}

nlohmann::json traffic_json(const Traffic& t) {
  return {{"l1_misses", t.l1_misses}, {"llc_misses", t.llc_misses}, {"dram_bytes", t.dram_bytes()}};
}

// A trace file or FIFO read in 1 MB blocks. lackey writes its trace one line per write()
// (hwtrace in 1 MB blocks, for which the wait below costs nothing);
// a reader that wakes for each line spends more CPU time in the kernel than lackey itself
// (measured: docs/hwmodel.md, "Agreement"). So the FIFO's buffer is enlarged to 1 MB and,
// while less than a quarter of it is filled, the reader sleeps 1 ms instead of blocking in
// read(): lackey's writes then land in the pipe without waking anyone.
class TraceBuf : public std::streambuf {
 public:
  explicit TraceBuf(const std::string& path) : path_(path), buf_(size_t{1} << 20) {
    fd_ = ::open(path.c_str(), O_RDONLY);
    check(fd_ >= 0, "replay: cannot open trace '{}'", path);
    struct stat st {};
    fifo_ = ::fstat(fd_, &st) == 0 && S_ISFIFO(st.st_mode);
    if (fifo_) ::fcntl(fd_, F_SETPIPE_SZ, static_cast<int>(buf_.size()));  // best effort (pipe-max-size)
  }
  ~TraceBuf() override { ::close(fd_); }
  TraceBuf(const TraceBuf&) = delete;
  TraceBuf& operator=(const TraceBuf&) = delete;

 protected:
  int_type underflow() override {
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
    check(n >= 0, "replay: cannot read trace '{}'", path_);
    if (n == 0) return traits_type::eof();
    setg(buf_.data(), buf_.data(), buf_.data() + n);
    return traits_type::to_int_type(buf_[0]);
  }

 private:
  std::string path_;
  std::vector<char> buf_;
  int fd_ = -1;
  bool fifo_ = false;
};

int cmd_replay(LayerOp op, const LayerDims& d, const SystemDesc& sys, const std::vector<std::string>& files,
               TraceFormat format, bool operands_only) {
  std::vector<std::unique_ptr<TraceBuf>> bufs;
  std::vector<std::unique_ptr<std::istream>> in;
  std::vector<std::istream*> ptrs;
  for (const auto& f : files) {
    bufs.push_back(std::make_unique<TraceBuf>(f));
    in.push_back(std::make_unique<std::istream>(bufs.back().get()));
    ptrs.push_back(in.back().get());
  }
  const auto r = replay_traces(ptrs, format, sys, op_operands(op, d), operands_only);
  auto j = traffic_json(r.traffic);
  j["instructions"] = r.instructions;
  // Per core, the non-operand lines touched between the markers: [L1 set, accesses], by set.
  const SetIndex l1_set(sys.l1);
  nlohmann::json other = nlohmann::json::array();
  for (const auto& lines : r.other_lines) {
    std::vector<std::pair<int64_t, int64_t>> v;
    for (const auto& [line, n] : lines) v.emplace_back(l1_set(static_cast<int64_t>(line)), n);
    std::sort(v.begin(), v.end());
    other.push_back(v);
  }
  j["other_lines"] = other;
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bertlab_hwref: reference kernels of one encoder layer, lackey replay, in-order core model"};
  app.require_subcommand(1);
  std::string op_name = "qkv", arr = "bwma", system_path, coeff_path, format = "lackey";
  int64_t seq = 128, S = 8, cores = 1;
  bool modulo = false, operands_only = false;
  std::vector<std::string> traces;
  auto common = [&](CLI::App* c) {
    c->add_option("--op", op_name, "encoder-layer op")->required();
    c->add_option("--seq", seq, "sequence length")->check(CLI::PositiveNumber);
  };
  auto* replay = app.add_subcommand("replay", "memory traces (one per core) into the exact simulator");
  common(replay);
  replay->add_option("--format", format, "trace format: lackey (text log) | hwtrace (binary, the hwtrace tool)")
      ->check(CLI::IsMember({"lackey", "hwtrace"}));
  replay->add_option("--system", system_path)->required();
  replay->add_flag("--modulo", modulo, "modulo-indexed LLC (as cachegrind's)");
  replay->add_flag("--operands-only", operands_only, "leave out accesses outside the operands (the stack)");
  replay->add_option("traces", traces)->required();
  auto* model = app.add_subcommand("model", "the in-order core model's counts of an op");
  common(model);
  model->add_option("--arrangement", arr, "rwma | bwma");
  model->add_option("--kernel", S);
  model->add_option("--cores", cores)->check(CLI::PositiveNumber);
  model->add_option("--system", system_path)->required();
  model->add_option("--coefficients", coeff_path, "instruction coefficients (JSON)");
  model->add_flag("--modulo", modulo, "modulo-indexed LLC (as cachegrind's)");
  std::vector<std::string> stack_spec;
  model->add_option("--stack", stack_spec,
                    "the kernel's stack lines: SET:TOUCHES_PER_STEP, comma-separated (default none)")
      ->delimiter(',');
  auto* table = app.add_subcommand("table", "the paper table, time per region broken down (core model)");
  table->add_option("--seq", seq)->check(CLI::PositiveNumber);
  table->add_option("--system", system_path)->required();
  table->add_option("--coefficients", coeff_path, "instruction coefficients (JSON)");
  CLI11_PARSE(app, argc, argv);
  try {
    LayerDims d;
    d.seq = seq;
    SystemDesc sys = load_system(system_path);
    if (modulo) sys.llc.hashed_index = false;
    if (*replay) return cmd_replay(layer_op_from_string(op_name), d, sys, traces, trace_format_from_string(format),
                                      operands_only);
    const auto coeffs = coeff_path.empty() ? CoreCoefficients{} : load_coefficients(coeff_path);
    if (*model) {
      CoreStack stack;
      for (const auto& e : stack_spec) {
        const auto colon = e.find(':');
        char* end = nullptr;
        StackLine l;
        l.l1_set = colon == std::string::npos ? -1 : std::strtoll(e.c_str(), &end, 10);
        check(colon != std::string::npos && end == e.c_str() + colon, "--stack: expected SET:TOUCHES_PER_STEP, got '{}'",
              e);
        l.per_step = std::strtod(e.c_str() + colon + 1, &end);
        check(*end == 0, "--stack: expected SET:TOUCHES_PER_STEP, got '{}'", e);
        stack.lines.push_back(l);
      }
      sys.cores = cores;
      sys.array.kernel = S;
      const auto m = model_op(layer_op_from_string(op_name), parse_arrangement(arr), d, sys, coeffs, stack);
      auto j = traffic_json(m.traffic);
      j["instructions"] = m.instructions;
      j["issues"] = m.issues;
      j["units"] = m.units;
      j["groups"] = m.groups;
      j["steps"] = m.steps;
      std::printf("%s\n", j.dump().c_str());
      return 0;
    }
    if (*table) {
      std::printf("%s", paper_table_markdown(d, sys, coeffs).c_str());
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bertlab_hwref: %s\n", e.what());
    return 1;
  }
  return 0;
}
