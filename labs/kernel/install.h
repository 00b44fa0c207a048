#pragma once
// Lab 2's seam: routes bertlab's layernorm and layernorm_grad nodes to labs/kernel/student.cpp
// (runtime/kernel_seam.h). The grader calls it before training; with -DBERTLAB_LAB_KERNEL=ON the
// CLI runs it at start (a startup hook: labs/kernel/plugin.cpp).
namespace bertlab::lab {
void install_student_kernel();
}
