// Lab 5's grader: the student's ring allreduce against MPI_Allreduce on 2, 3 and 4 ranks and
// sizes that do not divide, with its point-to-point messages and bytes counted through MPI's
// profiling interface (each MPI_Send... below counts, then calls PMPI_Send...). The grader
// starts `mpirun ... lab_allreduce --worker` for each check; the worker does the MPI part.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
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

// Rank k's data: n floats from its own seed (every rank can regenerate any rank's).
std::vector<float> rank_data(int k, size_t n) {
  std::mt19937 gen(1234 + k);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// What a wrong element holds, as a symptom: how many times it holds each rank's value (the
// closest sum with each rank's value taken 0, 1 or 2 times), or that it is no such sum.
std::string holds(size_t i, float got, int ranks) {
  std::vector<double> v;
  double scale = 1;
  for (int k = 0; k < ranks; ++k) {
    v.push_back(rank_data(k, i + 1)[i]);
    scale += std::abs(v.back());
  }
  std::vector<int> best, c(ranks, 0);
  double best_err = INFINITY;
  for (;;) {
    double sum = 0;
    for (int k = 0; k < ranks; ++k) sum += c[k] * v[k];
    if (std::abs(sum - got) < best_err) best_err = std::abs(sum - got), best = c;
    int k = 0;
    while (k < ranks && ++c[k] == 3) c[k++] = 0;
    if (k == ranks) break;
  }
  if (!std::isfinite(got) || best_err > 1e-4 * scale) return "it is not a sum of the ranks' values";
  static const char* const kTimes[] = {"not at all", "once", "twice"};
  std::string r = "it holds";
  for (int k = 0; k < ranks; ++k) r += fmt::format("{} rank {}'s value {}", k ? "," : "", k, kTimes[best[k]]);
  return r;
}

// A rank that crashes or hits an MPI error says so on one line ("RANKFAIL <rank>: <what>") before
// it ends, for the grader to name it: mpirun's own report of it is not always printed.
int g_rank = -1;

void write_line(const char* s) {
  const size_t n = std::strlen(s);
  size_t off = 0;
  while (off < n) {
    const ssize_t w = ::write(1, s + off, n - off);
    if (w <= 0) return;
    off += static_cast<size_t>(w);
  }
}

extern "C" void on_crash(int sig) {
  // Async-signal-safe: a line built in a fixed buffer, written with write(2).
  char line[128];
  std::snprintf(line, sizeof line, "\nRANKFAIL %d crashed with signal %d (%s)\n", g_rank, sig,
                sig == SIGSEGV ? "Segmentation fault" : sig == SIGBUS ? "Bus error" : sig == SIGFPE ? "Floating point exception"
                : sig == SIGILL ? "Illegal instruction" : "Aborted");
  write_line(line);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

extern "C" void on_mpi_error(MPI_Comm*, int* code, ...) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  PMPI_Error_string(*code, text, &len);
  write_line(fmt::format("\nRANKFAIL {} hit an MPI error: {}\n", g_rank, std::string(text, len)).c_str());
  PMPI_Abort(MPI_COMM_WORLD, 1);
}

void report_failures(int rank) {
  g_rank = rank;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, on_crash);
  MPI_Errhandler handler;
  PMPI_Comm_create_errhandler(on_mpi_error, &handler);
  PMPI_Comm_set_errhandler(MPI_COMM_WORLD, handler);
}

// The worker (under mpirun): random data per rank, the student's ring against MPI_Allreduce,
// timings of both, then rank 0 prints one JSON line with every rank's result.
int worker(size_t n, int repeats) {
  PMPI_Init(nullptr, nullptr);
  int rank = 0, size = 1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  report_failures(rank);
  std::vector<float> data = rank_data(rank, n), want(n);
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
        bad = fmt::format("element {} is {:.7g}, MPI_Allreduce gives {:.7g}: {}", i, got[i], want[i],
                          holds(i, got[i], size));
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

// Seconds the ranks of one check may take (--quick: the test suite's small arrays).
unsigned g_rank_seconds = 120;

// What went wrong in an mpirun that printed no result, in a line: the time-out, or the rank
// that crashed or hit an MPI error, as mpirun reports it; else the start of its output.
std::string mpirun_failure(int ranks, size_t n, int status, const std::string& out) {
  const std::string where = fmt::format("ring_allreduce of {} floats on {} ranks", n, ranks);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 124)
    return fmt::format("{}: the ranks did not finish within {} s (stopped): are some ranks waiting for each other?",
                       where, g_rank_seconds);
  std::smatch m;
  if (std::regex_search(out, m, std::regex(R"(RANKFAIL (-?\d+) ([^\n]*))")))
    return fmt::format("{}: rank {} {}", where, m[1].str(), m[2].str());  // "rank 1 crashed ...", "rank 1 hit ..."
  if (std::regex_search(out, m, std::regex(R"(process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+) \(([^)]*)\))")))
    return fmt::format("{}: rank {} crashed with signal {} ({})", where, m[1].str(), m[2].str(), m[3].str());
  std::smatch call, err;
  if (std::regex_search(out, call, std::regex(R"(An error occurred in (\w+))")) &&
      std::regex_search(out, err, std::regex(R"(\*\*\* (MPI_ERR_\w+[^\n]*))"))) {
    std::smatch rank;
    const bool named = std::regex_search(out, rank, std::regex(R"(reported by process \[\d+,(\d+)\])"));
    return fmt::format("{}: {} failed on {}: {}", where, call[1].str(), named ? "rank " + rank[1].str() : "a rank",
                       err[1].str());
  }
  return fmt::format("{}: mpirun ended ({}) without a result; its output:\n{}", where,
                     WIFEXITED(status) ? fmt::format("exit code {}", WEXITSTATUS(status))
                                       : fmt::format("status {}", status),
                     out.substr(0, 2000));
}

// Every rank's result, or what went wrong (mpirun_failure) when mpirun printed none.
struct RankRun {
  nlohmann::json ranks;
  std::string failure;
};

RankRun run_ranks(int ranks, size_t n, int repeats) {
  const std::string cmd =
      fmt::format("timeout {} mpirun --allow-run-as-root --oversubscribe -np {} '{}' --worker --n {} --repeats {} 2>&1",
                  g_rank_seconds, ranks, self_path(), n, repeats);
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  const int status = p ? pclose(p) : -1;
  const auto at = out.find("RESULT ");
  if (at == std::string::npos) return {{}, mpirun_failure(ranks, n, status, out)};
  return {nlohmann::json::parse(out.substr(at + 7, out.find('\n', at) - at - 7)), {}};
}

// Sum-correctness, and only point-to-point calls, on every rank.
Outcome correct(int ranks, size_t n) {
  const RankRun run = run_ranks(ranks, n, 0);
  if (!run.failure.empty()) return failed(run.failure);
  const auto& r = run.ranks;
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
  const RankRun run = run_ranks(ranks, n, plots ? 5 : 0);
  if (!run.failure.empty()) return failed(run.failure);
  const auto& r = run.ranks;
  const long P = ranks, floor_chunk = static_cast<long>(n) / P, ceil_chunk = (static_cast<long>(n) + P - 1) / P;
  long total = 0;
  for (const auto& x : r) {
    const int k = x["rank"];
    if (x.contains("error")) return failed(fmt::format("rank {} threw: {}", k, x["error"].get<std::string>()));
    if (!x["collective"].get<std::string>().empty())
      return failed(fmt::format("rank {} called {}: use point-to-point messages only", k,
                                x["collective"].get<std::string>()));
    // Which way a count is off, not the ring's count: step 3 asks for it.
    const long m = x["messages"], b = x["bytes"];
    if (m != 2 * (P - 1))
      return failed(fmt::format("rank {} sent {} messages: {} than a ring on {} ranks sends", k, m,
                                m > 2 * (P - 1) ? "more" : "fewer", P));
    if (b < 2 * (P - 1) * floor_chunk * 4 || b > 2 * (P - 1) * ceil_chunk * 4)
      return failed(fmt::format("rank {} sent {} bytes: {} than a ring on {} ranks sends", k, b,
                                b > 2 * (P - 1) * ceil_chunk * 4 ? "more" : "fewer", P));
    total += b;
  }
  const long ring_total = 2 * (P - 1) * static_cast<long>(n) * 4;
  if (total != ring_total)
    return failed(fmt::format("all ranks sent {} bytes together: {} than a ring on {} ranks sends", total,
                              total > ring_total ? "more" : "fewer", P));
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
  g_rank_seconds = o.quick ? 20 : 100;  // under the checks' own limit (120 s), so the time-out is named
  // Hints say what to look at, not the ring's steps (step 1 asks for them) nor its counts (step 3).
  const char* hint_sum = "the detail names a rank, the first wrong element and which ranks' values it holds: "
                         "follow that element around your ring by hand, step by step, on that many ranks";
  g.check("2 ranks, 1000 floats", hint_sum, [] { return correct(2, 1000); });
  g.check("3 ranks, 1001 floats (P does not divide n)", hint_sum, [] { return correct(3, 1001); });
  g.check("4 ranks, 3 floats (n < P: empty chunks)",
          "with fewer floats than ranks some chunks are empty: follow every rank through every step by hand; what "
          "does each one send and wait for?",
          [] { return correct(4, 3); });
  const size_t big = o.quick ? (1u << 16) + 3 : (1u << 22) + 3;
  g.check(fmt::format("4 ranks, {} floats: messages and bytes", big),
          "count by hand what each of your ranks sends at each step, against the ring of the handout's background; "
          "if the ranks did not finish, what does each wait for when a chunk is large?",
          [&] { return traffic(4, big, &plots); }, 300);  // timed with --quick too: no blank page
  if (!o.quick)
    g.info("bertlab training, 1 process against mpirun -np 2", [&] { return training_scaling(o.data, o.steps, plots); },
           900);
  fmt::print("plots: {}\n", plots.write("Lab 5: data-parallel training").string());
  return g.finish();
}
