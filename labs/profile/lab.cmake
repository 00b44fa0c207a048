# Lab 1 (labs/profile/README.md). The grader builds BERT training graphs; it times nothing.
bertlab_add_lab(profile ISA_PAGES LIBS bertlab_runtime CLI11::CLI11 TEST_ARGS --quick PAGE_ARGS --bf16-lab)
# Planted bugs (tests/labs/profile_planted.cpp): each must fail its check, without the answer.
bertlab_add_planted_bug(profile linear_forgets_bias_bytes "linear nodes" FORBID "the graph [0-9]")
bertlab_add_planted_bug(profile scores_read_all_of_qkv "attention-score nodes" FORBID "the graph [0-9]")
bertlab_add_planted_bug(profile layernorm_forgets_gamma_beta "layernorm nodes" FORBID "the graph [0-9]")
bertlab_add_planted_bug(profile one_prediction_wrong "your predictions" FORBID "you said|%|\\((up|down|same)\\)")
bertlab_add_planted_bug(profile predictions_crash "your predictions" FORBID "%|\\((up|down|same)\\)"
                        EXPECT "crashed with signal [0-9]+ .* while working on predictions\\(\\)")
