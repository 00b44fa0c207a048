# Lab 3 (labs/arrangement/README.md). The grader runs the accelerator model (hwmodel/): the
# layout, the exact trace simulator and the analytic model behind `bertlab estimate`.
bertlab_add_lab(arrangement LIBS bertlab_hwmodel bertlab_runtime CLI11::CLI11 TEST_ARGS --quick)
