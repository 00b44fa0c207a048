#pragma once
// Measures the sustained oneDNN matmul rate of this machine on one large square GEMM.
namespace bertlab::ops {

struct PeakResult {
  double gflops = 0;   // median over repetitions
  int n = 0;           // matrix size used
};

// f32 (bf16 = false) or bf16 inputs with f32 accumulation; runs for about `seconds`.
PeakResult measure_matmul_peak(bool bf16, double seconds = 1.0, int n = 2048);

}  // namespace bertlab::ops
