# Lab 1 (labs/profile/README.md). The grader builds BERT training graphs; it times nothing.
bertlab_add_lab(profile LIBS bertlab_runtime CLI11::CLI11 TEST_ARGS --quick)
