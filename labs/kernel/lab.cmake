# Lab 2 (labs/kernel/README.md). The tests train BERT-tiny for a few steps on the fixture corpus.
bertlab_add_lab(kernel ISA_PAGES SOURCES ${CMAKE_CURRENT_LIST_DIR}/install.cpp
                LIBS bertlab_runtime bertlab_data CLI11::CLI11 TEST_ARGS --quick)
# Planted bugs (tests/labs/kernel_planted.cpp): each must fail its check, naming the shape and the
# element, with hints that give no formula (step 3 asks for the backward's).
set(kernel_forbid "mean\\(g|g = dy|H ?- ?1|inside the square root|biased variance|divide by H")
bertlab_add_planted_bug(kernel forward_unbiased_variance "forward matches" FORBID "${kernel_forbid}"
                        EXPECT "y \\(1 x 1\\)")
bertlab_add_planted_bug(kernel forward_eps_outside_sqrt "forward matches" FORBID "${kernel_forbid}"
                        EXPECT "nearly equal values\\): first mismatch at element")
bertlab_add_planted_bug(kernel forward_drops_tail "forward matches" FORBID "${kernel_forbid}"
                        EXPECT "y \\(1 x 1\\): first non-finite value")
bertlab_add_planted_bug(kernel backward_overwrites_dgamma_dbeta "backward matches finite" FORBID "${kernel_forbid}"
                        EXPECT "dgamma \\(0.25 before the call\\)")
