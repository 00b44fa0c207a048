#pragma once
// Softmax cross-entropy over rows of logits, with ignored rows (label -100), as PyTorch's
// CrossEntropyLoss(ignore_index=-100).
#include <cstdint>

namespace bertlab::ops {

inline constexpr int32_t kIgnoreLabel = -100;

struct CrossEntropyStats {
  double loss_sum = 0;  // sum of -log p(label) over counted rows
  double correct = 0;   // rows whose argmax equals the label
  double count = 0;     // rows with a label
};

// logits (N,C), labels (N)
CrossEntropyStats cross_entropy_forward(const float* logits, const int32_t* labels, int64_t N,
                                        int64_t C);
CrossEntropyStats cross_entropy_forward_reference(const float* logits, const int32_t* labels,
                                                  int64_t N, int64_t C);
// dlogits (N,C) = (softmax(logits) - onehot(label)) / denominator; 0 on ignored rows.
void cross_entropy_backward(float* dlogits, const float* logits, const int32_t* labels, int64_t N,
                            int64_t C, float denominator);
void cross_entropy_backward_reference(float* dlogits, const float* logits, const int32_t* labels,
                                      int64_t N, int64_t C, float denominator);

}  // namespace bertlab::ops
