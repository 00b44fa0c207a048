// Lab 2's seam as a plugin of the bertlab binary (-DBERTLAB_LAB_KERNEL=ON): a startup hook that
// routes bertlab's layernorm to the student's file (apps/plugins.h). Linked into bertlab only;
// the grader calls install_student_kernel itself.
#include "apps/plugins.h"
#include "labs/kernel/install.h"

namespace {
[[maybe_unused]] const bool registered = bertlab::app::register_startup_hook(
    {"lab-kernel", "layernorm runs labs/kernel/student.cpp (built with -DBERTLAB_LAB_KERNEL=ON)",
     &bertlab::lab::install_student_kernel});
}  // namespace
