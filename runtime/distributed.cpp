#include "runtime/distributed.h"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "base/error.h"

namespace bertlab::dist {

namespace {

void mpi_check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  fail("MPI {} failed: {}", what, std::string(text, static_cast<size_t>(len)));
}

// MPI counts are int: large buffers go in chunks.
template <class F>
void chunked(int64_t count, F&& f) {
  constexpr int64_t kChunk = std::numeric_limits<int>::max() / 2;
  for (int64_t at = 0; at < count; at += kChunk) f(at, static_cast<int>(std::min(kChunk, count - at)));
}

}  // namespace

bool launched_by_mpi() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

World& World::get() {
  static World world;
  return world;
}

World::World() {
  if (!launched_by_mpi()) return;
  int provided = 0;
  // Only the main thread calls MPI; OpenMP threads compute between the calls.
  mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "initialisation");
  initialised_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

World::~World() {
  int finalized = 0;
  if (initialised_ && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Finalize();
}

void World::allreduce_sum(float* data, int64_t count) {
  if (!distributed()) return;
  chunked(count, [&](int64_t at, int n) {
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, data + at, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "allreduce");
  });
}

void World::allreduce_sum(double* data, int64_t count) {
  if (!distributed()) return;
  chunked(count, [&](int64_t at, int n) {
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, data + at, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "allreduce");
  });
}

void World::broadcast(float* data, int64_t count, int root) {
  if (!distributed()) return;
  chunked(count, [&](int64_t at, int n) {
    mpi_check(MPI_Bcast(data + at, n, MPI_FLOAT, root, MPI_COMM_WORLD), "broadcast");
  });
}

std::string World::broadcast_text(const std::string& text, int root) {
  if (!distributed()) return text;
  int64_t size = static_cast<int64_t>(text.size());
  mpi_check(MPI_Bcast(&size, 1, MPI_INT64_T, root, MPI_COMM_WORLD), "broadcast");
  std::string out = rank_ == root ? text : std::string(static_cast<size_t>(size), '\0');
  chunked(size, [&](int64_t at, int n) {
    mpi_check(MPI_Bcast(out.data() + at, n, MPI_CHAR, root, MPI_COMM_WORLD), "broadcast");
  });
  return out;
}

void World::abort(int status) {
  if (initialised_) MPI_Abort(MPI_COMM_WORLD, status);
  std::exit(status);
}

}  // namespace bertlab::dist
