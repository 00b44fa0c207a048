#pragma once
// Lab 2: the functions you write in labs/kernel/student.cpp. Shapes: x, y, dy, dx are (rows, H)
// row-major; gamma, beta, dgamma, dbeta are (H). Layer normalization over each row:
//   mean = sum(x) / H,  var = sum((x - mean)^2) / H  (biased),  rstd = 1 / sqrt(var + eps)
//   y = (x - mean) * rstd * gamma + beta
#include <cstdint>

namespace bertlab::lab::kernel {

void layernorm_forward(float* y, const float* x, const float* gamma, const float* beta, int64_t rows, int64_t H,
                       float eps);

// Given dy = dL/dy, write dx = dL/dx, and ADD dL/dgamma to dgamma and dL/dbeta to dbeta
// (bertlab accumulates parameter gradients over the layers' uses and micro-batches).
void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x, const float* gamma,
                        int64_t rows, int64_t H, float eps);

}  // namespace bertlab::lab::kernel
