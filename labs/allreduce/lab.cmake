# Lab 5 (labs/allreduce/README.md). The grader runs mpirun on itself (--worker).
bertlab_add_lab(allreduce LIBS MPI::MPI_CXX CLI11::CLI11 nlohmann_json::nlohmann_json TEST_ARGS --quick)
