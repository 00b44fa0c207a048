# Lab 2 (labs/kernel/README.md). The tests train BERT-tiny for a few steps on the fixture corpus.
bertlab_add_lab(kernel SOURCES ${CMAKE_CURRENT_LIST_DIR}/install.cpp
                LIBS bertlab_runtime bertlab_data CLI11::CLI11 TEST_ARGS --quick)
