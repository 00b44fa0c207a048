// bertlab_hwref: the tools around the reference of the arrangement estimate (docs/hwmodel.md,
// "Reference"; the kernels run under valgrind are bertlab_hwref_kernel, kernel_main.cpp).
// Subcommands:
//   replay  lackey traces (one file or FIFO per core) into the exact cache/DRAM simulator
//   model   the in-order core model's counts for the same op (core_model.h)
//   table   the paper table with the time broken down per region (core model, seq 512)
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cstdio>
#include <fstream>
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

int cmd_replay(LayerOp op, const LayerDims& d, const SystemDesc& sys, const std::vector<std::string>& files,
               bool operands_only) {
  std::vector<std::unique_ptr<std::ifstream>> in;
  std::vector<std::istream*> ptrs;
  for (const auto& f : files) {
    in.push_back(std::make_unique<std::ifstream>(f));
    check(in.back()->good(), "replay: cannot open trace '{}'", f);
    ptrs.push_back(in.back().get());
  }
  const auto r = replay_lackey(ptrs, sys, op_operands(op, d), operands_only);
  auto j = traffic_json(r.traffic);
  j["instructions"] = r.instructions;
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bertlab_hwref: reference kernels of one encoder layer, lackey replay, in-order core model"};
  app.require_subcommand(1);
  std::string op_name = "qkv", arr = "bwma", system_path, coeff_path;
  int64_t seq = 128, S = 8, cores = 1;
  bool modulo = false, operands_only = false;
  std::vector<std::string> traces;
  auto common = [&](CLI::App* c) {
    c->add_option("--op", op_name, "encoder-layer op")->required();
    c->add_option("--seq", seq, "sequence length")->check(CLI::PositiveNumber);
  };
  auto* replay = app.add_subcommand("replay", "lackey traces (one per core) into the exact simulator");
  common(replay);
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
    if (*replay) return cmd_replay(layer_op_from_string(op_name), d, sys, traces, operands_only);
    const auto coeffs = coeff_path.empty() ? CoreCoefficients{} : load_coefficients(coeff_path);
    if (*model) {
      sys.cores = cores;
      sys.array.kernel = S;
      const auto m = model_op(layer_op_from_string(op_name), parse_arrangement(arr), d, sys, coeffs);
      auto j = traffic_json(m.traffic);
      j["instructions"] = m.instructions;
      j["issues"] = m.issues;
      j["units"] = m.units;
      j["groups"] = m.groups;
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
