// The labs' grader (labs/common/grader.h): one forked child per check.
#include "labs/common/grader.h"

#include <algorithm>
#include <vector>

#include "base/error.h"
#include "base/file_util.h"
#include "ops/isa.h"
#include "report/chart.h"

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

namespace bertlab::lab {

namespace {

// The child's verdict travels back through a pipe: one byte (P or F), then the detail.
void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

std::string read_all(int fd) {
  std::string s;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(n));
  return s;
}

// working_on's page, shared by the grader and the check's child (MAP_SHARED survives fork):
// a NUL-terminated text. Made by the parent before its first child.
constexpr size_t kWorkingOnBytes = 512;
char* g_working_on = nullptr;

char* working_on_page() {
  if (!g_working_on) {
    void* p = ::mmap(nullptr, kWorkingOnBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap of the grader's shared page failed");
    g_working_on = static_cast<char*>(p);
  }
  return g_working_on;
}

// " while working on X", or nothing when the check named nothing.
std::string while_working_on() {
  if (!g_working_on || g_working_on[0] == '\0') return {};
  return fmt::format(" while working on {}", std::string(g_working_on, ::strnlen(g_working_on, kWorkingOnBytes)));
}

}  // namespace

void working_on(std::string_view what) {
  if (!g_working_on) return;  // not in a check's child (the page is made before the first fork)
  size_t n = std::min(what.size(), size_t{400});
  // Whole UTF-8 characters only: a cut word stays valid text in the results file.
  while (n > 0 && n < what.size() && (static_cast<unsigned char>(what[n]) & 0xC0) == 0x80) --n;
  std::memcpy(g_working_on, what.data(), n);
  if (n < what.size()) std::memcpy(g_working_on + n, "...", 3), n += 3;
  g_working_on[n] = '\0';
}

Outcome compare(const std::string& what, std::span<const float> got, std::span<const float> want, double atol,
                double rtol, size_t cols) {
  if (got.size() != want.size())
    return failed(fmt::format("{}: {} elements, expected {}", what, got.size(), want.size()));
  auto where = [&](size_t i) {
    return cols ? fmt::format("element {} (row {}, column {})", i, i / cols, i % cols) : fmt::format("element {}", i);
  };
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]))
      return failed(fmt::format("{}: first non-finite value at {}: {} (expected {})", what, where(i), got[i], want[i]));
    const double diff = std::abs(double(got[i]) - double(want[i]));
    if (diff > atol + rtol * std::abs(double(want[i])))
      return failed(fmt::format("{}: first mismatch at {}: got {:.7g}, expected {:.7g} (tolerance {:.1e} + {:.1e} x |expected|)",
                                what, where(i), got[i], want[i], atol, rtol));
    worst = std::max(worst, diff);
  }
  return passed(fmt::format("{}: {} elements match, largest difference {:.2e}", what, got.size(), worst));
}

Grader::Grader(std::string lab, std::string results_json) : lab_(std::move(lab)), results_json_(std::move(results_json)) {
  fmt::print("lab {}\n", lab_);
}

namespace {

// Runs fn in a forked child; returns its outcome, or a failure naming the signal, the time-out
// or the early exit.
Outcome run_in_child(const std::function<Outcome()>& fn, unsigned seconds) {
  std::fflush(stdout);
  working_on_page()[0] = '\0';
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(seconds);
    Outcome o;
    try {
      o = fn();
    } catch (const std::exception& e) {
      o = failed(fmt::format("threw{}: {}", while_working_on(), e.what()));
    } catch (...) {
      o = failed(fmt::format("threw an exception that is not a std::exception{}", while_working_on()));
    }
    std::fflush(stdout);
    write_all(fds[1], std::string(1, o.pass ? 'P' : 'F') + o.detail);
    ::close(fds[1]);
    std::_Exit(0);
  }
  ::close(fds[1]);
  const std::string verdict = read_all(fds[0]);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return failed(sig == SIGALRM ? fmt::format("did not finish within {} s{}", seconds, while_working_on())
                                 : fmt::format("crashed with signal {} ({}){}", sig, strsignal(sig), while_working_on()));
  }
  if (verdict.empty())
    return failed(fmt::format("exited with status {} before reporting{}", WEXITSTATUS(status), while_working_on()));
  return {verdict[0] == 'P', verdict.substr(1)};
}

}  // namespace

bool Grader::check(const std::string& name, const std::string& hint, const std::function<Outcome()>& fn,
                   unsigned seconds) {
  const Outcome o = run_in_child(fn, seconds);
  checks_.push_back({name, o.pass, o.detail, hint});
  fmt::print("[{}] {}{}{}\n", o.pass ? "PASS" : "FAIL", name, o.detail.empty() ? "" : ": ", o.detail);
  if (!o.pass) fmt::print("       hint: {}\n", hint);
  std::fflush(stdout);
  return o.pass;
}

void Grader::print_info(const std::string& line) {
  infos_.push_back(line);
  fmt::print("{}\n", line);
  std::fflush(stdout);
}

void Grader::info(const std::string& name, const std::function<std::string()>& fn, unsigned seconds) {
  if (const char* only = std::getenv("BERTLAB_LAB_CHECKS_ONLY"); only && std::string_view(only) == "1") {
    print_info(fmt::format("[INFO] {}: not measured (BERTLAB_LAB_CHECKS_ONLY=1)", name));
    return;
  }
  const Outcome o = run_in_child([&] { return passed(fn()); }, seconds);
  print_info(fmt::format("[INFO] {}: {}{}", name, o.pass ? "" : "could not measure: ", o.detail));
}

void Grader::withheld(const std::string& name, const std::string& until_check) {
  print_info(fmt::format("[INFO] {}: shown once the check '{}' passes", name, until_check));
}

void Grader::skipped(const std::string& name, const std::string& reason) {
  print_info(fmt::format("[SKIP] {}: {}", name, reason));
}

std::string bf16_unavailable() { return ops::bf16_unavailable_reason(); }

int Grader::finish() const {
  const auto passed_count = std::count_if(checks_.begin(), checks_.end(), [](const CheckResult& c) { return c.pass; });
  const auto total = static_cast<std::ptrdiff_t>(checks_.size());
  const std::string summary =
      fmt::format("lab {}: {} of {} checks passed{}", lab_, passed_count, total,
                  passed_count == total ? "" : fmt::format(" ({} checks failed)", total - passed_count));
  fmt::print("{}\n", summary);
  if (!results_json_.empty()) {
    try {
      write_file_atomic(results_json_, gradescope_results_json(summary, checks_, infos_));
    } catch (const std::exception& e) {
      std::fflush(stdout);
      fmt::print(stderr, "error: --json {}: could not write the results: {}\n", results_json_, e.what());
      return 2;
    }
    fmt::print("results (Gradescope format): {}\n", results_json_);
  }
  std::fflush(stdout);
  return passed_count == total ? 0 : 1;
}

std::string gradescope_results_json(const std::string& summary, const std::vector<CheckResult>& checks,
                                    const std::vector<std::string>& infos) {
  nlohmann::json tests = nlohmann::json::array();
  int score = 0;
  for (const CheckResult& c : checks) {
    score += c.pass ? 1 : 0;
    tests.push_back({{"name", c.name},
                     {"score", c.pass ? 1 : 0},
                     {"max_score", 1},
                     {"status", c.pass ? "passed" : "failed"},
                     {"output", c.pass ? c.detail : c.detail + "\nhint: " + c.hint},
                     {"visibility", "visible"}});
  }
  std::string output = summary;
  for (const auto& line : infos) output += "\n" + line;
  const nlohmann::json results = {{"score", score},
                                  {"max_score", static_cast<int>(checks.size())},
                                  {"output", output},
                                  {"visibility", "visible"},
                                  {"stdout_visibility", "hidden"},
                                  {"tests", tests}};
  return results.dump(2) + "\n";
}

void add_results_json_option(CLI::App& app, std::string& file) {
  app.add_option("--json", file,
                 "Also write the results to FILE in the format of Gradescope's autograder (results.json)")
      ->check([](const std::string& path) {
        try {
          check_output_writable(path, "--json");
          return std::string();
        } catch (const std::exception& e) {
          return std::string(e.what());
        }
      });
}

PlotPage::PlotPage(std::filesystem::path dir, std::string lab) : dir_(std::move(dir)), lab_(std::move(lab)) {
  std::filesystem::remove_all(dir_ / (lab_ + ".parts"));  // a new grader run starts a new page
}

void PlotPage::add(const std::string& html) const {
  const auto parts = dir_ / (lab_ + ".parts");
  std::filesystem::create_directories(parts);
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(parts)) ++n;
  write_file_atomic(parts / fmt::format("{:03}.html", n), html);
}

std::filesystem::path PlotPage::write(const std::string& title) const {
  const auto parts = dir_ / (lab_ + ".parts");
  std::vector<std::filesystem::path> files;
  if (std::filesystem::exists(parts))
    for (const auto& e : std::filesystem::directory_iterator(parts)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::string body = fmt::format("<h1>{}</h1>\n", html_escape(title));
  size_t charts = 0;
  for (const auto& f : files) {
    const std::string part = read_file(f);
    for (size_t at = part.find("<svg class=\"chart\""); at != std::string::npos;
         at = part.find("<svg class=\"chart\"", at + 1))
      ++charts;
    body += part;
  }
  std::filesystem::create_directories(dir_);
  const auto page = dir_ / (lab_ + ".html");
  write_file_atomic(page, html_page(title, body, charts));
  return page;
}

void add_training_lab_options(CLI::App& app, TrainingLabOptions& o, const std::string& steps_help,
                              const std::string& quick_help) {
  app.add_option("--data", o.data, "Prepared pretraining data (bertlab prepare; the handout says how)");
  app.add_option("--out", o.out, "Where the plots page and the training runs go");
  app.add_option("--steps", o.steps, steps_help)->check(CLI::PositiveNumber);
  app.add_flag("--quick", o.quick, quick_help);
  add_results_json_option(app, o.results_json);
}

std::string source_dir() { return BERTLAB_SOURCE_DIR; }

std::string bertlab_binary() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "bertlab";
  std::string self(buf, static_cast<size_t>(n));
  // build/labs/lab_X -> build/bertlab
  const auto labs_dir = self.substr(0, self.rfind('/'));
  return labs_dir.substr(0, labs_dir.rfind('/')) + "/bertlab";
}

std::string bertlab_command() { return std::string(BERTLAB_RUN) + "'" + bertlab_binary() + "'"; }

QuickFixture prepare_quick_fixture(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const std::string bin = bertlab_command(), corpus = source_dir() + "/tests/data/corpus_small.txt";
  const std::string cmd = fmt::format(
      "{0} vocab --corpus '{1}' --vocab-size 200 --out '{2}/vocab' > '{2}/prep.log' 2>&1 && "
      "{0} prepare --corpus '{1}' --vocab '{2}/vocab' --seq-len 32 --dupe-factor 4 --force --out '{2}/data' "
      ">> '{2}/prep.log' 2>&1",
      bin, corpus, dir.string());
  if (std::system(cmd.c_str()) != 0)
    throw std::runtime_error("preparing the fixture data failed: see " + (dir / "prep.log").string());
  auto cfg = nlohmann::json::parse(std::ifstream(source_dir() + "/configs/bert-tiny.json"));
  int64_t words = 0;
  std::ifstream vocab(dir / "vocab/vocab.txt");
  for (std::string line; std::getline(vocab, line);) ++words;
  cfg["vocab_size"] = words;
  cfg["max_position_embeddings"] = 64;
  write_file_atomic(dir / "config.json", cfg.dump(2));
  return {dir / "config.json", dir / "data"};
}

}  // namespace bertlab::lab
