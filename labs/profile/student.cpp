// Lab 1: the cost of a node, by hand, and your predictions (labs/profile/README.md). Read
// labs/profile/lab.h for the conventions. Replace each `throw` with your code.
// Check with: ./build/bertlab lab check profile
#include <stdexcept>

#include "labs/profile/lab.h"

namespace bertlab::lab::profile {

Cost linear(int64_t rows, int64_t K, int64_t N, bool residual, double activation_flops) {
  // The GEMM, then the epilogue (bias, residual, activation). Bytes: x, W, b, (residual), y.
  throw std::logic_error("linear is not written yet (labs/profile/student.cpp)");
}

Cost attention_scores(int64_t B, int64_t S, int64_t H, int64_t heads) {
  // How many GEMMs, of which M, N and K? Which thirds of qkv are read?
  throw std::logic_error("attention_scores is not written yet (labs/profile/student.cpp)");
}

Cost layernorm(int64_t rows, int64_t H) {
  throw std::logic_error("layernorm is not written yet (labs/profile/student.cpp)");
}

Cost softmax(int64_t B, int64_t heads, int64_t S) {
  throw std::logic_error("softmax is not written yet (labs/profile/student.cpp)");
}

Predictions predictions() {
  // Write your four predictions BEFORE you run the profiles of the handout's step 4, e.g.
  //   return {Move::up, Move::up, Move::up, Move::up};
  throw std::logic_error("predictions are not written yet (labs/profile/student.cpp)");
}

}  // namespace bertlab::lab::profile
