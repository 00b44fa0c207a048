#pragma once
// Lab 5: the function you write in labs/allreduce/student.cpp.
#include <cstddef>
#include <mpi.h>

namespace bertlab::lab::allreduce {

// On every rank of `comm`, replaces data[0..n) by the element-wise sum over all ranks, with the
// ring algorithm: split the array into P chunks (P = the number of ranks), then
//   P-1 reduce-scatter steps: send one chunk to the next rank, receive one from the previous
//       rank and add it in; afterwards each rank holds the full sum of one chunk;
//   P-1 allgather steps: pass the summed chunks around the ring, overwriting.
// Use only point-to-point calls (MPI_Send, MPI_Recv, MPI_Sendrecv, MPI_Isend, MPI_Irecv, MPI_Wait...).
// n need not be a multiple of P, and may be smaller than P.
void ring_allreduce(float* data, size_t n, MPI_Comm comm);

}  // namespace bertlab::lab::allreduce
