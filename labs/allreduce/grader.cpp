// Lab 5's grader: the student's ring allreduce against MPI_Allreduce on 2, 3 and 4 ranks and
// sizes that do not divide, with its point-to-point messages and bytes counted through MPI's
// profiling interface (each MPI_Send... below counts, then calls PMPI_Send...). The grader
// starts `mpirun ... lab_allreduce --worker` for each check; the worker does the MPI part.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "labs/allreduce/lab.h"
#include "labs/common/grader.h"
#include "report/chart.h"

using namespace bertlab;
using namespace bertlab::lab;

namespace {

// What the student's call did on this rank.
struct Counts {
  bool on = false;
  long messages = 0, bytes = 0;
  std::string collective;  // the first collective called while counting, if any
} g_counts;

void count_send(int count, MPI_Datatype type) {
  if (!g_counts.on) return;
  int size = 0;
  PMPI_Type_size(type, &size);
  ++g_counts.messages;
  g_counts.bytes += static_cast<long>(count) * size;
}

void note_collective(const char* name) {
  if (g_counts.on && g_counts.collective.empty()) g_counts.collective = name;
}

}  // namespace

// MPI's profiling interface: these replace the library's entry points in this program.
extern "C" {
int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  count_send(count, type);
  return PMPI_Send(buf, count, type, dest, tag, comm);
}
int MPI_Ssend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  count_send(count, type);
  return PMPI_Ssend(buf, count, type, dest, tag, comm);
}
int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* req) {
  count_send(count, type);
  return PMPI_Isend(buf, count, type, dest, tag, comm, req);
}
int MPI_Sendrecv(const void* sbuf, int scount, MPI_Datatype stype, int dest, int stag, void* rbuf, int rcount,
                 MPI_Datatype rtype, int source, int rtag, MPI_Comm comm, MPI_Status* status) {
  count_send(scount, stype);
  return PMPI_Sendrecv(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, source, rtag, comm, status);
}
int MPI_Sendrecv_replace(void* buf, int count, MPI_Datatype type, int dest, int stag, int source, int rtag,
                         MPI_Comm comm, MPI_Status* status) {
  count_send(count, type);
  return PMPI_Sendrecv_replace(buf, count, type, dest, stag, source, rtag, comm, status);
}
int MPI_Allreduce(const void* s, void* r, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  note_collective("MPI_Allreduce");
  return PMPI_Allreduce(s, r, count, type, op, comm);
}
int MPI_Reduce(const void* s, void* r, int count, MPI_Datatype type, MPI_Op op, int root, MPI_Comm comm) {
  note_collective("MPI_Reduce");
  return PMPI_Reduce(s, r, count, type, op, root, comm);
}
int MPI_Reduce_scatter_block(const void* s, void* r, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  note_collective("MPI_Reduce_scatter_block");
  return PMPI_Reduce_scatter_block(s, r, count, type, op, comm);
}
int MPI_Allgather(const void* s, int scount, MPI_Datatype stype, void* r, int rcount, MPI_Datatype rtype,
                  MPI_Comm comm) {
  note_collective("MPI_Allgather");
  return PMPI_Allgather(s, scount, stype, r, rcount, rtype, comm);
}
int MPI_Bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  note_collective("MPI_Bcast");
  return PMPI_Bcast(buf, count, type, root, comm);
}
}

namespace {

// The worker (under mpirun): random data per rank, the student's ring against MPI_Allreduce,
// timings of both, then rank 0 prints one JSON line with every rank's result.
int worker(size_t n, int repeats) {
  PMPI_Init(nullptr, nullptr);
  int rank = 0, size = 1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  std::mt19937 gen(1234 + rank);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> data(n), want(n);
  for (auto& v : data) v = d(gen);
  PMPI_Allreduce(data.data(), want.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  nlohmann::json r{{"rank", rank}};
  try {
    auto got = data;
    g_counts.on = true;
    bertlab::lab::allreduce::ring_allreduce(got.data(), n, MPI_COMM_WORLD);
    g_counts.on = false;
    r["messages"] = g_counts.messages;
    r["bytes"] = g_counts.bytes;
    r["collective"] = g_counts.collective;
    std::string bad;
    for (size_t i = 0; i < n && bad.empty(); ++i)
      if (!std::isfinite(got[i]) || std::abs(got[i] - want[i]) > 1e-5f * (1 + std::abs(want[i])))
        bad = fmt::format("element {} is {:.7g}, MPI_Allreduce gives {:.7g}", i, got[i], want[i]);
    r["mismatch"] = bad;
    // Timings: median of `repeats` calls of each (the data keeps growing; only time matters).
    std::vector<double> ring, mpi;
    for (int k = 0; k < repeats; ++k) {
      PMPI_Barrier(MPI_COMM_WORLD);
      auto t0 = std::chrono::steady_clock::now();
      bertlab::lab::allreduce::ring_allreduce(got.data(), n, MPI_COMM_WORLD);
      ring.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      PMPI_Barrier(MPI_COMM_WORLD);
      t0 = std::chrono::steady_clock::now();
      PMPI_Allreduce(MPI_IN_PLACE, got.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      mpi.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ring.begin(), ring.end());
    std::sort(mpi.begin(), mpi.end());
    if (repeats > 0) r["ring_s"] = ring[ring.size() / 2], r["mpi_s"] = mpi[mpi.size() / 2];
  } catch (const std::exception& e) {
    r["error"] = e.what();
  }
  // Every rank's line to rank 0 (fixed-size records keep the gather simple).
  std::string line = r.dump();
  line.resize(1024, ' ');
  std::vector<char> all(rank == 0 ? 1024 * size : 0);
  PMPI_Gather(line.data(), 1024, MPI_CHAR, all.data(), 1024, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    nlohmann::json ranks = nlohmann::json::array();
    for (int k = 0; k < size; ++k) ranks.push_back(nlohmann::json::parse(std::string(all.data() + 1024 * k, 1024)));
    fmt::print("RESULT {}\n", ranks.dump());
  }
  PMPI_Finalize();
  return 0;
}

std::string self_path() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return std::string(buf, n > 0 ? static_cast<size_t>(n) : 0);
}

nlohmann::json run_ranks(int ranks, size_t n, int repeats) {
  const std::string cmd = fmt::format(
      "timeout 120 mpirun --allow-run-as-root --oversubscribe -np {} '{}' --worker --n {} --repeats {} 2>&1", ranks,
      self_path(), n, repeats);
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  const int status = p ? pclose(p) : -1;
  const auto at = out.find("RESULT ");
  if (at == std::string::npos)
    throw std::runtime_error(fmt::format("mpirun -np {} ended (status {}) without a result; output:\n{}", ranks,
                                         status, out.substr(0, 2000)));
  return nlohmann::json::parse(out.substr(at + 7, out.find('\n', at) - at - 7));
}

// Sum-correctness, and only point-to-point calls, on every rank.
Outcome correct(int ranks, size_t n) {
  const auto r = run_ranks(ranks, n, 0);
  for (const auto& x : r) {
    const int k = x["rank"];
    if (x.contains("error")) return failed(fmt::format("rank {} threw: {}", k, x["error"].get<std::string>()));
    if (!x["collective"].get<std::string>().empty())
      return failed(fmt::format("rank {} called {}: use point-to-point messages only", k,
                                x["collective"].get<std::string>()));
    if (!x["mismatch"].get<std::string>().empty())
      return failed(fmt::format("rank {}: {}", k, x["mismatch"].get<std::string>()));
  }
  return passed("every rank holds MPI_Allreduce's sum");
}

// The ring's cost: 2(P-1) messages per rank, and 2(P-1)/P of the array sent by each rank
// (2(P-1) n floats over all ranks: each chunk travels P-1 hops in each phase).
Outcome traffic(int ranks, size_t n, const PlotPage* plots) {
  const auto r = run_ranks(ranks, n, plots ? 5 : 0);
  const long P = ranks, floor_chunk = static_cast<long>(n) / P, ceil_chunk = (static_cast<long>(n) + P - 1) / P;
  long total = 0;
  for (const auto& x : r) {
    const int k = x["rank"];
    if (x.contains("error")) return failed(fmt::format("rank {} threw: {}", k, x["error"].get<std::string>()));
    const long m = x["messages"], b = x["bytes"];
    if (m != 2 * (P - 1))
      return failed(fmt::format("rank {} sent {} messages; a ring on {} ranks sends 2(P-1) = {}", k, m, P, 2 * (P - 1)));
    if (b < 2 * (P - 1) * floor_chunk * 4 || b > 2 * (P - 1) * ceil_chunk * 4)
      return failed(fmt::format("rank {} sent {} bytes; expected 2(P-1) chunks of {}-{} floats", k, b, floor_chunk,
                                ceil_chunk));
    total += b;
  }
  if (total != 2 * (P - 1) * static_cast<long>(n) * 4)
    return failed(fmt::format("all ranks sent {} bytes together; expected 2(P-1) n x 4 = {}", total,
                              2 * (P - 1) * static_cast<long>(n) * 4));
  std::string timing;
  if (plots) {
    const double ring_s = r[0]["ring_s"], mpi_s = r[0]["mpi_s"];
    timing = fmt::format("; rank 0: your ring {:.2f} ms, MPI_Allreduce {:.2f} ms (median of 5)", ring_s * 1e3, mpi_s * 1e3);
    plots->add("<h2>Your ring against MPI_Allreduce</h2>\n" +
               bar_chart_html({fmt::format("allreduce of {:.1f} MB on {} ranks", n * 4 / 1e6, ranks), "milliseconds",
                              {"time"}, {{"your ring", {}, {ring_s * 1e3}}, {"MPI_Allreduce", {}, {mpi_s * 1e3}}}}));
  }
  return passed(fmt::format("{} messages and {:.2f} MB per rank, {:.2f} MB in all{}", 2 * (P - 1),
                            total / double(P) / 1e6, total / 1e6, timing));
}

// bertlab's own data-parallel training: one process against mpirun -np 2 (sequences/s).
std::string training_scaling(const std::string& data, int64_t steps, const PlotPage& plots) {
  auto seq_per_s = [&](int ranks) {
    const std::string cmd = fmt::format(
        "timeout 600 mpirun --allow-run-as-root --oversubscribe -np {} {} train --config '{}/configs/bert-mini.json' "
        "--data '{}' --out out/labs/allreduce-np{} --overwrite --max-steps {} --batch-size 8 --lr 1e-3 --log-steps {} "
        "--threads {} 2>&1",
        ranks, bertlab_command(), source_dir(), data, ranks, steps, steps, 2 / ranks);
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    while (p && fgets(buf, sizeof buf, p)) out += buf;
    if (!p || pclose(p) != 0) throw std::runtime_error("training failed: " + out.substr(0, 2000));
    std::string last;
    const std::regex rate(R"(([0-9.]+) seq/s)");
    for (auto it = std::sregex_iterator(out.begin(), out.end(), rate); it != std::sregex_iterator(); ++it)
      last = (*it)[1];
    if (last.empty()) throw std::runtime_error("no seq/s in the training output");
    return std::stod(last);
  };
  const double one = seq_per_s(1), two = seq_per_s(2);
  plots.add("<h2>bertlab training, 1 and 2 processes</h2>\n" +
            bar_chart_html({"BERT-mini training on this machine (batch 8 per process)", "sequences/s", {"throughput"},
                           {{"1 process, 2 threads", {}, {one}}, {"2 processes, 1 thread each", {}, {two}}}}));
  return fmt::format("1 process: {:.1f} seq/s; mpirun -np 2: {:.1f} seq/s ({:.2f}x)", one, two, two / one);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 5 grader: a ring allreduce (labs/allreduce/student.cpp)"};
  TrainingLabOptions o;
  o.steps = 40;
  add_training_lab_options(app, o, "Training steps of the 1- and 2-process runs", "Smaller arrays, no training measurement (the test suite)");
  bool is_worker = false;
  size_t n = 0;
  int repeats = 0;
  app.add_flag("--worker", is_worker, "(internal) one rank of a check, under mpirun");
  app.add_option("--n", n, "(internal) floats per rank");
  app.add_option("--repeats", repeats, "(internal) timed calls");
  CLI11_PARSE(app, argc, argv);
  if (is_worker) return worker(n, repeats);

  Grader g("allreduce: a ring on MPI point-to-point messages", o.results_json);
  const PlotPage plots(o.out, "allreduce");
  const char* hint_sum = "chunk c is [c*n/P, (c+1)*n/P); at reduce-scatter step s send chunk rank-s, receive and "
                         "add chunk rank-s-1 (mod P); then pass the finished chunks on for P-1 steps";
  g.check("2 ranks, 1000 floats", hint_sum, [] { return correct(2, 1000); });
  g.check("3 ranks, 1001 floats (P does not divide n)", hint_sum, [] { return correct(3, 1001); });
  g.check("4 ranks, 3 floats (n < P: empty chunks)", "a chunk may have 0 elements: send and receive 0 floats",
          [] { return correct(4, 3); });
  const size_t big = o.quick ? (1u << 16) + 3 : (1u << 22) + 3;
  g.check(fmt::format("4 ranks, {} floats: messages and bytes", big),
          "one send per step: 2(P-1) sends of one chunk each; no collectives",
          [&] { return traffic(4, big, &plots); }, 300);  // timed with --quick too: no blank page
  if (!o.quick)
    g.info("bertlab training, 1 process against mpirun -np 2", [&] { return training_scaling(o.data, o.steps, plots); },
           900);
  fmt::print("plots: {}\n", plots.write("Lab 5: data-parallel training").string());
  return g.finish();
}
