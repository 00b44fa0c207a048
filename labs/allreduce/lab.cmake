# Lab 5 (labs/allreduce/README.md). The grader runs mpirun on itself (--worker).
bertlab_add_lab(allreduce LIBS MPI::MPI_CXX CLI11::CLI11 nlohmann_json::nlohmann_json TEST_ARGS --quick)
# Planted bugs (tests/labs/allreduce_planted.cpp): each must fail its check without the ring's
# message or byte counts (step 3's answer).
bertlab_add_planted_bug(allreduce through_rank_0 "4 ranks, 65539" FORBID "2\\(P-1\\)|= 6|expected"
                        EXPECT "rank 0 sent 3 messages: fewer than a ring")
bertlab_add_planted_bug(allreduce blocking_send_first "4 ranks, 65539" FORBID "2\\(P-1\\)|= 6|expected"
                        EXPECT "did not finish within")
bertlab_add_planted_bug(allreduce empty_chunk_not_sent "4 ranks, 3 floats" EXPECT "rank [0-9] hit an MPI error")
