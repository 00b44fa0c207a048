// bertlab_hwref: the tools around the reference of the arrangement estimate (docs/hwmodel.md,
// "Reference"; the kernels run under valgrind are bertlab_hwref_kernel, kernel_main.cpp).
// Subcommands:
//   replay  memory traces (lackey's text log or hwtrace's binary trace, one file or FIFO per
//           core) into the exact cache/DRAM simulator (--dump-accesses: and the accesses it
//           simulated into a file, for tests/reference/cache_sim.py)
//   model   the in-order core model's counts for the same op (core_model.h)
//   table   the paper table with the time broken down per region (core model, seq 512)
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cstdio>
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

nlohmann::json traffic_json(const Traffic& t) {
  return {{"l1_misses", t.l1_misses}, {"llc_misses", t.llc_misses}, {"dram_bytes", t.dram_bytes()}};
}

int cmd_replay(LayerOp op, const LayerDims& d, const SystemDesc& sys, const std::vector<std::string>& files,
               TraceFormat format, bool operands_only, const std::vector<int64_t>& writers, double open_timeout,
               const std::string& dump) {
  check(writers.empty() || writers.size() == files.size(), "--writer-pid: expected one per trace ({}), got {}",
        files.size(), writers.size());
  for (const int64_t w : writers) check(w > 0, "--writer-pid: expected a process id (a positive integer), got {}", w);
  check(open_timeout > 0, "--open-timeout: expected a positive number of seconds, got {}", open_timeout);
  std::vector<std::unique_ptr<TraceReader>> bufs;
  std::vector<std::unique_ptr<std::istream>> in;
  std::vector<std::istream*> ptrs;
  for (const auto& f : files) {
    bufs.push_back(std::make_unique<TraceReader>(f, writers.empty() ? 0 : writers[bufs.size()], open_timeout));
    in.push_back(std::make_unique<std::istream>(bufs.back().get()));
    ptrs.push_back(in.back().get());
  }
  const auto r = replay_traces(ptrs, format, sys, op_operands(op, d), operands_only, dump);
  auto j = traffic_json(r.traffic);
  if (!dump.empty()) {  // what the independent cache check compares (docs/hwmodel-cache-check.md)
    j["read_lines"] = r.traffic.read_lines();
    j["write_lines"] = r.traffic.write_lines();
    nlohmann::json per = nlohmann::json::object();
    for (const auto& [name, o] : r.traffic.operands) per[name] = {o.read_lines, o.write_lines};
    j["operand_lines"] = per;
  }
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
  std::vector<int64_t> writers;
  double open_timeout = 120;
  replay
      ->add_option("--writer-pid", writers,
                   "per trace FIFO, in order, the id of the process that writes it (the tracer; once per trace): "
                   "the replay fails at once when it exits without opening its FIFO")
      ->allow_extra_args(false);
  replay->add_option("--open-timeout", open_timeout,
                     "seconds to wait for a writer to open a trace FIFO before failing (default 120)");
  std::string dump;
  replay->add_option("--dump-accesses", dump,
                     "write every simulated access to this file (format: hwmodel/lackey_replay.h), for the "
                     "independent cache simulator tests/reference/cache_sim.py");
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
    if (*replay)
      return cmd_replay(layer_op_from_string(op_name), d, sys, traces, enum_from_string<TraceFormat>(format, "trace format"), operands_only,
                        writers, open_timeout, dump);
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
      const auto m = model_op(layer_op_from_string(op_name), arrangement_from_string(arr, "--arrangement"), d, sys, coeffs, stack);
      auto j = traffic_json(m.traffic);
      j["instructions"] = m.instructions;
      j["issues"] = m.issues;
      j["units"] = m.units;
      j["groups"] = m.groups;
      j["steps"] = m.steps;
      j["tlb_misses"] = m.tlb_misses;
      const OpTime t = op_time(m, sys);  // the busiest core's cycles by component, and the op's
      j["time"] = {{"instructions", t.instructions}, {"array", t.array}, {"l1_stall", t.l1_stall},
                   {"llc_stall", t.llc_stall}, {"tlb_stall", t.tlb_stall}, {"dram_floor", t.dram}, {"cycles", t.total()}};
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
