#pragma once
// Lab 2's seam: routes bertlab's layernorm and layernorm_grad nodes to labs/kernel/student.cpp
// (runtime/kernel_seam.h). The grader calls it before training; the CLI calls it at start when
// configured with -DBERTLAB_LAB_KERNEL=ON.
namespace bertlab::lab {
void install_student_kernel();
}
