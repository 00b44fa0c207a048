# Lab 4 (labs/precision/README.md).
bertlab_add_lab(precision ISA_PAGES LIBS bertlab_runtime bertlab_data Eigen3::Eigen CLI11::CLI11 TEST_ARGS --quick
                PAGE_ARGS --bf16-lab)
# Planted bugs (tests/labs/precision_planted.cpp): each must fail its check.
bertlab_add_planted_bug(precision ties_away_from_even "float_to_bf16")
bertlab_add_planted_bug(precision unscale_stops_at_first_inf "loss scaling")
bertlab_add_planted_bug(precision overflow_keeps_good_steps "loss scaling")
