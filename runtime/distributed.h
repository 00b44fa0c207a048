#pragma once
// Data parallelism over MPI (OpenMPI): `mpirun -np N bertlab train ...` runs N processes, each
// with the whole model and 1/N of every batch; the gradients are summed by an allreduce node
// of the training graph before the optimizer. A process not started by an MPI launcher is a
// world of one, and MPI is then never initialised.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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
  // Asynchronous in-place sums, for gradient buckets started while backward still runs. Every
  // rank must start the same sums in the same order. A communication thread of this process
  // starts them (MPI_Iallreduce) and progresses them by polling every few tens of
  // microseconds (OpenMPI moves a non-blocking collective on only inside MPI calls), so that
  // they advance during long kernels without a spinning core. wait_all() returns when every
  // started sum is complete; MPI calls of the caller are allowed again only after it. The
  // bf16 sum adds in fp32 and rounds to nearest even (the gradient compression of multi-node
  // pretraining: half the bytes on the wire).
  void start_allreduce_sum(float* data, int64_t count);
  void start_allreduce_sum_bf16(uint16_t* data, int64_t count);
  void wait_all();
  // Rank `root`'s data to every rank.
  void broadcast(float* data, int64_t count, int root = 0);
  // Rank `root`'s text to every rank (returned; `text` as is in a world of one).
  std::string broadcast_text(const std::string& text, int root = 0);
  // Every rank's bytes, in rank order, on every rank (MPI_Allgather of the sizes, then
  // MPI_Allgatherv); {mine} in a world of one. All ranks together may send at most INT_MAX bytes.
  std::vector<std::vector<std::byte>> allgather(const std::vector<std::byte>& mine);
  // Ends every rank of the job (after an error on one of them, the others would wait forever).
  [[noreturn]] void abort(int status);

  World(const World&) = delete;
  World& operator=(const World&) = delete;
  ~World();

 private:
  World();
  struct Pending;  // the communication thread and its sums (mpi.h stays out of this header)
  int rank_ = 0, size_ = 1;
  bool initialised_ = false;
  std::unique_ptr<Pending> pending_;
};

// True when this process was started by an MPI launcher (OpenMPI's mpirun sets
// OMPI_COMM_WORLD_SIZE), without initialising anything.
bool launched_by_mpi();

}  // namespace bertlab::dist
