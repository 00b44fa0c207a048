// bertlab calibrate: measures this machine (oneDNN GEMM rates f32/bf16 on a large square and on
// BERT-shaped GEMMs, OpenMP read/write/triad bandwidth) and writes machine.json. The peak is the
// square GEMM's; faster shapes are flagged as outliers with the reason (runtime/machine.h
// review_calibration).
#include <fmt/core.h>

#include "apps/commands.h"
#include "apps/common.h"
#include "apps/profile_common.h"
#include "runtime/machine.h"

namespace bertlab::app {

namespace {
struct CalibrateCliOptions {
  std::string out = "machine.json";
  CalibrateOptions calib;
  int64_t bandwidth_mb = 0;
  int threads = 0;
};

// The GEMM table (outliers marked), the peaks and why, and the bandwidths.
void print_calibration(const MachineInfo& m, const CalibrationReview& review) {
  fmt::print("  cpu: {} (oneDNN ISA {}, native bf16: {})\n", m.cpu_model, m.isa, m.bf16 ? "yes" : "no");
  fmt::print("  {:<28} {:>5} {:>5} {:>6} {:>6} {:>6} {:>9}\n", "GEMM", "prec", "batch", "m", "n", "k", "GFLOP/s");
  std::vector<bool> outlier(m.gemms.size(), false);
  for (const auto& x : review.outliers) outlier[x.index] = true;
  for (size_t i = 0; i < m.gemms.size(); ++i) {
    const auto& g = m.gemms[i];
    fmt::print("  {:<28} {:>5} {:>5} {:>6} {:>6} {:>6} {:>9.1f}{}\n", g.name, file_key(g.precision), g.batch, g.m,
               g.n, g.k, g.gflops, outlier[i] ? "  outlier (below)" : "");
  }
  fmt::print("  GEMM peak (the {} GEMM): f32 {:.1f} GFLOP/s{}\n", kSquareGemmName, m.gemm_peak_f32,
             m.gemm_peak_bf16 ? fmt::format(", bf16 {:.1f} GFLOP/s", *m.gemm_peak_bf16) : "");
  for (const auto& x : review.outliers) {
    const auto& g = m.gemms[x.index];
    fmt::print("  outlier: {} {} at {:.1f} GFLOP/s is {:.2f}x the square GEMM: {}\n", g.name, file_key(g.precision),
               g.gflops, x.times_square, x.reason);
  }
  fmt::print("  bandwidth ({} MB arrays): read {:.1f}, write {:.1f}, triad {:.1f} GB/s\n",
             m.bandwidth_array_bytes >> 20, m.bandwidth_read, m.bandwidth_write, m.bandwidth_triad);
  if (m.bandwidth_triad_resident)
    fmt::print("  cache-resident triad ({:.2f} MB arrays, in cache): {:.1f} GB/s\n",
               double(m.bandwidth_resident_array_bytes) / (1 << 20), *m.bandwidth_triad_resident);
  if (review.resident_below_dram) fmt::print("  note: {}\n", review.resident_note);
}

}  // namespace

void add_calibrate_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("calibrate", "Measure GEMM peak and memory bandwidth; write machine.json");
  auto o = std::make_shared<CalibrateCliOptions>();
  cmd->add_option("--out", o->out, "Output file (default machine.json)");
  cmd->add_option("--seconds", o->calib.seconds, "Seconds per measurement (default 1)")
      ->check(positive_number());
  cmd->add_option("--square", o->calib.square_n, "Size of the large square GEMM (default 2048)")
      ->check(positive_number());
  cmd->add_option("--bandwidth-mb", o->bandwidth_mb,
                  "MB per array in the bandwidth loops (default: 4 x last-level cache, 256..1024)")
      ->check(positive_number());
  cmd->add_option("--batch", o->calib.batch, "Batch of the BERT-base GEMM shapes (default 8)")
      ->check(positive_number());
  cmd->add_option("--seq", o->calib.seq, "Sequence length of the BERT-base GEMM shapes (default 128)")
      ->check(CLI::Range(1, 512));
  cmd->add_option("--passes", o->calib.passes,
                  "Whole calibration passes; each figure keeps its best (default 1; use 3+ on a shared machine)")
      ->check(CLI::Range(1, 100));
  add_threads_option(*cmd, o->threads);
  cmd->callback([o] {
    set_threads(o->threads);
    check_output_writable(o->out, "--out");
    o->calib.bandwidth_array_bytes = o->bandwidth_mb << 20;
    fmt::print("calibrate: {} threads, {:.2g} s per measurement, {} pass(es), best of them kept\n", omp_threads(),
               o->calib.seconds, o->calib.passes);
    CalibrationReview review;
    MachineInfo m = calibrate_machine(o->calib, &review);
    print_calibration(m, review);
    if (m.parallel_region_us)
      fmt::print("  OpenMP parallel region ({} threads, median): {:.2f} us\n", m.threads,
                 *m.parallel_region_us);
    if (m.elementwise_gelem_per_s) {
      std::string rates;
      for (size_t i = 0; i < m.elementwise_gelem_per_s->size(); ++i)
        rates += fmt::format("{}{} {:.2f}", i ? ", " : "", ops::to_string(ops::kElementwiseKernels[i]),
                             (*m.elementwise_gelem_per_s)[i]);
      fmt::print("  element-wise kernels ({} elements): {} G elements/s\n", m.elementwise_elements, rates);
    }
    write_text_atomically(o->out, machine_to_json(m).dump(2) + "\n");
    if (o->out != "-") fmt::print("  wrote {}\n", o->out);
  });
}

}  // namespace bertlab::app
