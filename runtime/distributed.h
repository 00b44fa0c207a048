#pragma once
// Data parallelism over MPI (OpenMPI): `mpirun -np N bertlab train ...` runs N processes, each
// with the whole model and 1/N of every batch; the gradients are summed by an allreduce node
// of the training graph before the optimizer. A process not started by an MPI launcher is a
// world of one, and MPI is then never initialised.
#include <cstdint>
#include <string>

namespace bertlab::dist {

class World {
 public:
  // The world of this process; initialises MPI on first use when launched by mpirun.
  static World& get();
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool distributed() const { return size_ > 1; }

  // In-place sums over all ranks (no-ops in a world of one). Counts may exceed INT_MAX.
  void allreduce_sum(float* data, int64_t count);
  void allreduce_sum(double* data, int64_t count);
  // Rank `root`'s data to every rank.
  void broadcast(float* data, int64_t count, int root = 0);
  // Rank `root`'s text to every rank (returned; `text` as is in a world of one).
  std::string broadcast_text(const std::string& text, int root = 0);
  // Ends every rank of the job (after an error on one of them, the others would wait forever).
  [[noreturn]] void abort(int status);

  World(const World&) = delete;
  World& operator=(const World&) = delete;
  ~World();

 private:
  World();
  int rank_ = 0, size_ = 1;
  bool initialised_ = false;
};

// True when this process was started by an MPI launcher (OpenMPI's mpirun sets
// OMPI_COMM_WORLD_SIZE), without initialising anything.
bool launched_by_mpi();

}  // namespace bertlab::dist
