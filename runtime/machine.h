#pragma once
// machine.json: what `bertlab calibrate` measured on this machine (GEMM peaks, memory
// bandwidth, thread count). The profiler's roofline and hwmodel's CPU description read it.
// Schema: docs/profiling.md.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ops/peak.h"
#include "runtime/precision.h"

namespace bertlab {

inline constexpr int kMachineFormatVersion = 1;

struct GemmCalibration {
  std::string name;       // "square", or the BERT node it stands for ("ffn.intermediate", ...)
  Precision precision = Precision::fp32;  // "f32" | "bf16" in the file
  int64_t batch = 1, m = 0, n = 0, k = 0;
  double gflops = 0;
};

struct MachineInfo {
  std::string cpu_model;  // /proc/cpuinfo "model name"
  std::string isa;        // the ISA oneDNN dispatches to
  bool bf16 = false;      // native bf16 matmul
  int logical_cpus = 0;
  int threads = 0;        // OpenMP threads used for every measurement
  std::string date;       // ISO 8601, UTC
  // GFLOP/s: the best rate among the measured GEMMs with every dimension >= 64.
  double gemm_peak_f32 = 0;
  std::optional<double> gemm_peak_bf16;    // GFLOP/s; absent without native bf16
  double bandwidth_read = 0, bandwidth_write = 0, bandwidth_triad = 0;  // GB/s (1e9 B/s)
  std::vector<GemmCalibration> gemms;
  int64_t bandwidth_array_bytes = 0;  // bytes per array in the bandwidth loops
  // Added after version 1 was first written; absent in older files (readers must cope):
  // triad over arrays small enough to stay in cache between repetitions (BERT-base activation
  // sizes), GB/s, with its array size; and the fixed cost of one OpenMP parallel region in
  // microseconds (the unit of the file, so that a file read and written again is unchanged).
  std::optional<double> bandwidth_triad_resident;
  int64_t bandwidth_resident_array_bytes = 0;
  std::optional<double> parallel_region_us;
  // The element-wise kernels whose cost is vector compute (ops::ElementwiseKernel, in its
  // order): 1e9 elements per second over `elementwise_elements` elements (the FFN's GELU at the
  // calibrated batch and sequence length).
  std::optional<ops::ElementwiseRates> elementwise_gelem_per_s;
  int64_t elementwise_elements = 0;
  int passes = 1;  // whole calibration passes, each figure the best of them (absent: 1)
  double seconds_per_measurement = 0;

  // The compute roof for GEMMs of a precision; throws if unmeasured.
  double gemm_peak(Precision precision) const;
};

struct CalibrateOptions {
  double seconds = 1.0;          // per measurement
  int square_n = 2048;           // the large square GEMM
  int64_t bandwidth_array_bytes = 0;  // 0: 4 x the last-level cache, at least 256 MB, at most 1 GB
  // The cache-resident triad: arrays the size of a BERT-base batch-8 activation (1024 x 768
  // f32 is 3 MB), 12 MB in all.
  int64_t resident_array_bytes = int64_t{4} << 20;
  // BERT-shaped GEMMs: those of a BERT-base inference graph at this batch and sequence length,
  // plus the backward dX and dW GEMMs of its linear layers.
  int64_t batch = 8, seq = 128;
  // Whole passes over every measurement; each figure keeps its best (a shared machine).
  int passes = 1;
};

// Measures this machine with the OpenMP thread count in force (see apps/common.h set_threads).
MachineInfo calibrate_machine(const CalibrateOptions& o);

nlohmann::json machine_to_json(const MachineInfo& m);
// {"gelu": ..., "gelu_grad": ..., "dropout": ...}: the rates under their kernels' names, as
// machine.json and hwmodel's cpu descriptions write them.
nlohmann::json elementwise_rates_json(const ops::ElementwiseRates& rates);
// `origin` (a file name) appears in errors, which say to run `bertlab calibrate`.
MachineInfo machine_from_json(const nlohmann::json& j, const std::string& origin);
MachineInfo load_machine(const std::filesystem::path& file);

}  // namespace bertlab
