# Lab 6 (labs/tokenize/README.md). --quick trains its vocabularies on the test fixture corpus.
bertlab_add_lab(tokenize LIBS bertlab_data CLI11::CLI11 TEST_ARGS --quick)
