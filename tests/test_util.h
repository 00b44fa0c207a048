#pragma once
// Helpers shared by the tests: a temporary directory and running the bertlab binary.
#include <catch2/catch.hpp>
#include <fmt/core.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace bertlab::testing {

namespace fs = std::filesystem;

class TempDir {
 public:
  explicit TempDir(const std::string& tag = "test") {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() / fmt::format("bertlab_{}_{}_{}", tag, ::getpid(), counter++);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline std::string quote(const fs::path& p) { return fmt::format("'{}'", p.string()); }

// Runs a shell command; a crash (signal) is reported as exit code -signal.
inline RunResult run_shell(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  RunResult r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  return r;
}

// Runs `bertlab ARGS`. BERTLAB_RUN is empty, or the emulator's command line and a space in a
// cross build (tests/CMakeLists.txt): the tests then start bertlab through qemu-user too.
inline RunResult run_bertlab(const std::string& args) {
  return run_shell(fmt::format("{}'{}' {}", BERTLAB_RUN, BERTLAB_BINARY, args));
}

// Runs `bertlab ARGS` as `ranks` MPI processes (OpenMPI's mpirun; root allowed, as in CI).
inline RunResult run_bertlab_mpi(int ranks, const std::string& args) {
  return run_shell(fmt::format("mpirun --allow-run-as-root --oversubscribe -np {} {}'{}' {}", ranks,
                               BERTLAB_RUN, BERTLAB_BINARY, args));
}

inline fs::path source_dir() { return fs::path(BERTLAB_SOURCE_DIR); }

// Loads a page of report/chart.h in headless Chromium and returns how many charts it declares
// and how many laid out with marks (data-charts-expected / -rendered, set by the page's script).
struct ChartsRendered {
  int expected = -1, rendered = -1;
};
inline ChartsRendered render_charts_in_chromium(const fs::path& html, const fs::path& scratch) {
  INFO("headless Chromium is needed: run scripts/setup.sh browser");
  REQUIRE(run_shell("command -v chromium").exit_code == 0);
  auto dom = run_shell(fmt::format(
      "timeout 90 chromium --headless --no-sandbox --disable-gpu --disable-background-networking "
      "--disable-component-update --disable-sync --no-first-run --user-data-dir={}/chrome "
      "--virtual-time-budget=5000 --dump-dom file://{}",
      scratch.string(), fs::absolute(html).string()));
  INFO(dom.output.substr(0, 2000));
  REQUIRE(dom.exit_code == 0);
  auto attr = [&](const char* name) {
    const std::string key = fmt::format("{}=\"", name);
    const auto at = dom.output.find(key);
    return at == std::string::npos ? -1 : std::atoi(dom.output.c_str() + at + key.size());
  };
  return {attr("data-charts-expected"), attr("data-charts-rendered")};
}

// Reproducible random test data.
inline std::vector<float> random_vector(int64_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<int32_t> random_ids(int64_t n, int32_t upper, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, upper - 1);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace bertlab::testing
