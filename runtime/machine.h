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
  // GFLOP/s: the large square GEMM's rate (review_calibration), the compute roof.
  double gemm_peak_f32 = 0;
  std::optional<double> gemm_peak_bf16;    // GFLOP/s; absent without native bf16
  double bandwidth_read = 0, bandwidth_write = 0, bandwidth_triad = 0;  // GB/s (1e9 B/s)
  std::vector<GemmCalibration> gemms;
  int64_t bandwidth_array_bytes = 0;  // bytes per array in the bandwidth loops
  // Added after version 1 was first written; absent in older files (readers must cope):
  // triad over arrays small enough to stay in the last-level cache (ops::measure_resident_triad),
  // GB/s, with its array size (absent when it came out below the DRAM triad: review_calibration);
  // and the fixed cost of one OpenMP parallel region in
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
  // The cache-resident triad's arrays: 0 sizes them from the cache (default_resident_array_bytes).
  int64_t resident_array_bytes = 0;
  // BERT-shaped GEMMs: those of a BERT-base inference graph at this batch and sequence length,
  // plus the backward dX and dW GEMMs of its linear layers.
  int64_t batch = 8, seq = 128;
  // Whole passes over every measurement; each figure keeps its best (a shared machine).
  int passes = 1;
};

// The cache-resident triad's array size: the three arrays fill at most half the last-level
// cache (the other half for everything else), and at most 4 MB each (a BERT-base batch-8
// activation, 1024 x 768 f32, is 3 MB), at least 64 KB; 4 MB when the cache size is unknown.
int64_t default_resident_array_bytes(int64_t llc_bytes);

// The name of the large square GEMM among MachineInfo::gemms.
inline constexpr const char* kSquareGemmName = "square";
// A BERT-shaped GEMM faster than the square GEMM of its precision by more than this factor is
// flagged as an outlier.
inline constexpr double kGemmOutlierFactor = 1.10;

struct GemmOutlier {
  size_t index = 0;         // into MachineInfo::gemms
  double times_square = 0;  // its rate / the square GEMM's of its precision
  std::string reason;       // in plain words
};

// What calibrate concludes from its measurements, and why, in words a student understands.
struct CalibrationReview {
  // The compute roof of each precision: the large square GEMM's rate. A GEMM library runs a
  // large square product at its best sustained rate, with operands far larger than the cache
  // like most of a model's GEMMs; a faster small or odd shape is a measurement to question, not
  // a roof (outliers).
  double gemm_peak_f32 = 0;
  std::optional<double> gemm_peak_bf16;
  std::vector<GemmOutlier> outliers;
  // The cache-resident triad came out below the DRAM triad: impossible on a quiet machine, so the
  // figure is left out of machine.json (the models then use the DRAM triad) and `note` says why.
  bool resident_below_dram = false;
  std::string resident_note;
};

// Reviews measurements: `m.gemms` (with the square GEMM of each precision measured) and the
// triads; `l2_bytes`, the per-core L2 cache (0: unknown), lets an outlier's reason say that its
// products fit in the cache. Pure: the tests give it measurements.
CalibrationReview review_calibration(const MachineInfo& m, int64_t l2_bytes);

// Measures this machine with the OpenMP thread count in force (see apps/common.h set_threads),
// then applies review_calibration: the peaks are the square GEMM's, and a resident triad below
// the DRAM triad is left out. `review`, when given, receives the review, for the command to print.
MachineInfo calibrate_machine(const CalibrateOptions& o, CalibrationReview* review = nullptr);

nlohmann::json machine_to_json(const MachineInfo& m);
// {"gelu": ..., "gelu_grad": ..., "dropout": ...}: the rates under their kernels' names, as
// machine.json and hwmodel's cpu descriptions write them.
nlohmann::json elementwise_rates_json(const ops::ElementwiseRates& rates);
// `origin` (a file name) appears in errors, which say to run `bertlab calibrate`.
MachineInfo machine_from_json(const nlohmann::json& j, const std::string& origin);
MachineInfo load_machine(const std::filesystem::path& file);

}  // namespace bertlab
