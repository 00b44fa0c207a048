#pragma once
// The seam through which a lab replaces one op's kernel (labs/kernel, lab 2: the student's
// layernorm). One row per replaceable op kind; the kind's kernel binding (runtime/rules/normalization.cpp)
// asks the seam when the executor builds the node's kernel, and binds bertlab's own kernel when the row is
// empty.
// Install before building an executor; the CLI installs the student's kernels when configured
// with -DBERTLAB_LAB_KERNEL=ON (a startup hook, labs/kernel/plugin.cpp), a lab's grader installs them itself.
#include <cstdint>

#include "runtime/op_table.h"

namespace bertlab {

// y (rows,H) = (x - mean) * rstd * gamma + beta over each row, biased variance, eps inside the root.
using LayerNormForwardKernel = void (*)(float* y, const float* x, const float* gamma, const float* beta,
                                        int64_t rows, int64_t H, float eps);
// dx (rows,H); dgamma (H) += sum over rows of dy * xhat; dbeta (H) += sum over rows of dy.
using LayerNormBackwardKernel = void (*)(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                                         const float* gamma, int64_t rows, int64_t H, float eps);

struct KernelSeam {
  LayerNormForwardKernel layernorm = nullptr;        // OpKind::layernorm
  LayerNormBackwardKernel layernorm_grad = nullptr;  // OpKind::layernorm_grad
  const char* source = nullptr;                      // where the replacement comes from (for messages)
};

// The process-wide seam (empty: bertlab's kernels everywhere).
KernelSeam& kernel_seam();
// Whether the seam replaces this op kind's kernel (the profiler and the trainer print it).
bool kernel_replaced(OpKind kind);

}  // namespace bertlab
