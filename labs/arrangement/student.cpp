// Lab 3: the BWMA address function and the cache lines of a GEMM, by hand
// (labs/arrangement/README.md). Read labs/arrangement/lab.h for the conventions. Replace each
// `throw` with your code. Check with: ./build/bertlab lab check arrangement
#include <stdexcept>

#include "labs/arrangement/lab.h"

namespace bertlab::lab::arrangement {

int64_t rwma_offset(int64_t row, int64_t col, int64_t rows, int64_t cols) {
  // The warm-up: row-major storage.
  throw std::logic_error("rwma_offset is not written yet (labs/arrangement/student.cpp)");
}

int64_t bwma_offset(int64_t row, int64_t col, int64_t rows, int64_t cols, int64_t S) {
  // Which panel holds column col? Where does that panel start? Where in the panel is the row?
  throw std::logic_error("bwma_offset is not written yet (labs/arrangement/student.cpp)");
}

Lines tile_lines(Layout layout, const Gemm& g) {
  // Draw the first S columns of A in memory under each layout: how many rows share a line?
  throw std::logic_error("tile_lines is not written yet (labs/arrangement/student.cpp)");
}

Lines cold_dram_reads(Layout layout, const Gemm& g) {
  // Every line of every matrix is read once: how many lines does each matrix occupy?
  throw std::logic_error("cold_dram_reads is not written yet (labs/arrangement/student.cpp)");
}

Lines bwma_small_llc_reads(const Gemm& g) {
  // Which operand is used again only after all of it has gone through the cache?
  throw std::logic_error("bwma_small_llc_reads is not written yet (labs/arrangement/student.cpp)");
}

std::vector<SpeedupGuess> predicted_speedups() {
  // Step 7: your guesses, before you run the sweep, e.g. {{8, 1, 1.5}, {32, 4, 2.0}}.
  return {};
}

FullModelPrediction full_model_prediction() {
  // Step 8: your two answers, before you run the full model (lab.h, Part D).
  throw std::logic_error("full_model_prediction is not written yet (labs/arrangement/student.cpp)");
}

}  // namespace bertlab::lab::arrangement
