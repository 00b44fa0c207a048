#pragma once
// Eigen views for the plain reference implementations: float buffers read as row-major
// matrices in double precision, so that a reference reads as the algebra it checks
// (y = x wᵀ + b) and shares no code with the oneDNN/OpenMP fast path it is tested against.
#include <Eigen/Core>
#include <cstdint>

namespace bertlab::ops::ref {

using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowD = Eigen::RowVectorXd;
using ColD = Eigen::VectorXd;
using Stride = Eigen::OuterStride<>;

// The rows x cols matrix at p whose rows start ld floats apart (ld = cols: dense), as double.
inline MatD load(const float* p, int64_t rows, int64_t cols, int64_t ld) {
  return Eigen::Map<const MatF, 0, Stride>(p, rows, cols, Stride(ld)).cast<double>();
}
inline MatD load(const float* p, int64_t rows, int64_t cols) { return load(p, rows, cols, cols); }
inline RowD load_row(const float* p, int64_t n) { return load(p, 1, n).row(0); }

// Writes m, rounded to float, to the matrix at p with row stride ld.
inline void store(float* p, const MatD& m, int64_t ld) {
  Eigen::Map<MatF, 0, Stride>(p, m.rows(), m.cols(), Stride(ld)) = m.cast<float>();
}
// Adds m, rounded to float, to the matrix at p with row stride ld (gradients accumulate).
inline void accumulate(float* p, const MatD& m, int64_t ld) {
  Eigen::Map<MatF, 0, Stride>(p, m.rows(), m.cols(), Stride(ld)) += m.cast<float>();
}

}  // namespace bertlab::ops::ref
