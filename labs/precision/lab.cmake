# Lab 4 (labs/precision/README.md).
bertlab_add_lab(precision LIBS bertlab_runtime bertlab_data Eigen3::Eigen CLI11::CLI11 TEST_ARGS --quick)
