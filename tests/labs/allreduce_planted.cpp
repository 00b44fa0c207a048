// Lab 5's solution with planted bugs (tests/labs/planted.h).
#include <vector>

#include "labs/allreduce/lab.h"
#include "tests/labs/planted.h"

namespace bertlab::lab::allreduce {

using planted::bug;

namespace {

// Bug: no ring: every rank sends its whole array to rank 0, which sends the sum back.
void through_rank_0(float* data, size_t n, MPI_Comm comm, int rank, int size) {
  const int count = static_cast<int>(n);
  if (rank != 0) {
    MPI_Send(data, count, MPI_FLOAT, 0, 0, comm);
    MPI_Recv(data, count, MPI_FLOAT, 0, 1, comm, MPI_STATUS_IGNORE);
    return;
  }
  std::vector<float> incoming(n);
  for (int k = 1; k < size; ++k) {
    MPI_Recv(incoming.data(), count, MPI_FLOAT, k, 0, comm, MPI_STATUS_IGNORE);
    for (size_t i = 0; i < n; ++i) data[i] += incoming[i];
  }
  for (int k = 1; k < size; ++k) MPI_Send(data, count, MPI_FLOAT, k, 1, comm);
}

// One ring step: send `send_n` floats to `next`, receive `recv_n` from `prev`, with the planted
// ways of getting it wrong.
void step(const float* send, size_t send_n, float* recv, size_t recv_n, int next, int prev, int tag, MPI_Comm comm) {
  if (bug("blocking_send_first")) {
    // Bug: every rank sends before it receives: fine while MPI buffers a message, stuck once it
    // is too large to buffer.
    MPI_Send(send, static_cast<int>(send_n), MPI_FLOAT, next, tag, comm);
    MPI_Recv(recv, static_cast<int>(recv_n), MPI_FLOAT, prev, tag, comm, MPI_STATUS_IGNORE);
    return;
  }
  if (bug("empty_chunk_not_sent") && send_n == 0) {
    // Bug: a rank with nothing to send skips the step, though its neighbour still sends to it and
    // the rank after it waits for its message.
    MPI_Recv(recv, static_cast<int>(recv_n), MPI_FLOAT, prev, tag, comm, MPI_STATUS_IGNORE);
    return;
  }
  MPI_Sendrecv(send, static_cast<int>(send_n), MPI_FLOAT, next, tag, recv, static_cast<int>(recv_n), MPI_FLOAT, prev,
               tag, comm, MPI_STATUS_IGNORE);
}

}  // namespace

void ring_allreduce(float* data, size_t n, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (size == 1) return;
  if (bug("through_rank_0")) return through_rank_0(data, n, comm, rank, size);
  const size_t P = static_cast<size_t>(size);
  auto begin = [&](size_t c) { return c * n / P; };
  auto mod = [&](long v) { return static_cast<size_t>(((v % size) + size) % size); };
  const int next = static_cast<int>(mod(rank + 1)), prev = static_cast<int>(mod(rank - 1));
  std::vector<float> incoming(n / P + 1);
  for (long s = 0; s < size - 1; ++s) {
    const size_t send_c = mod(rank - s), recv_c = mod(rank - s - 1);
    const size_t send_n = begin(send_c + 1) - begin(send_c), recv_n = begin(recv_c + 1) - begin(recv_c);
    step(data + begin(send_c), send_n, incoming.data(), recv_n, next, prev, 0, comm);
    for (size_t i = 0; i < recv_n; ++i) data[begin(recv_c) + i] += incoming[i];
  }
  for (long s = 0; s < size - 1; ++s) {
    const size_t send_c = mod(rank + 1 - s), recv_c = mod(rank - s);
    const size_t send_n = begin(send_c + 1) - begin(send_c), recv_n = begin(recv_c + 1) - begin(recv_c);
    step(data + begin(send_c), send_n, data + begin(recv_c), recv_n, next, prev, 1, comm);
  }
}

}  // namespace bertlab::lab::allreduce
