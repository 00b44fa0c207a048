# Lab 3 (labs/arrangement/README.md). The grader runs the accelerator model (hwmodel/): the
# layout, the exact trace simulator and the analytic model behind `bertlab estimate`.
bertlab_add_lab(arrangement LIBS bertlab_hwmodel bertlab_runtime CLI11::CLI11 TEST_ARGS --quick)
# Planted bugs (tests/labs/arrangement_planted.cpp): each must fail its check, without the answer
# (the simulator's counts, the right offset, or the [INFO] line with the too-small LLC's counts).
bertlab_add_planted_bug(arrangement bwma_last_panel_unpadded "BWMA offsets" FORBID "expected")
bertlab_add_planted_bug(arrangement rwma_rows_share_lines "lines of one array step" FORBID "simulator counts|A 24, W 8, Y 24")
bertlab_add_planted_bug(arrangement small_llc_keeps_a "BWMA DRAM reads of a whole GEMM, LLC too small"
                        FORBID "simulator counts|A 8192|LLC too small to keep A: [^s]")
