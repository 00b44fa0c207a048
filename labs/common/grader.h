#pragma once
// The labs' grader: a list of checks, each run in a child process (fork) with a time limit, so
// that a student function that crashes, loops or throws fails its check instead of ending the
// grader. Each check prints PASS or FAIL, what was measured and, on failure, a hint; the grader
// exits 1 if any check failed. With --json FILE it also writes the results in the format of
// Gradescope's autograder (results.json: one point per check), for a course's grading system. Checks must not start OpenMP work in the parent: everything that
// computes runs inside the check's function (in the child).
#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fmt/format.h>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace bertlab::lab {

struct Outcome {
  bool pass = false;
  std::string detail;  // what was measured or found (printed after PASS/FAIL)
};
inline Outcome passed(std::string detail = {}) { return {true, std::move(detail)}; }
inline Outcome failed(std::string detail) { return {false, std::move(detail)}; }

// got against want element by element: fails at the first non-finite element of `got` or the
// first with |got - want| > atol + rtol * |want|, naming the index (and the row/column when
// `cols` > 0) and both values. On success the detail gives the largest difference.
Outcome compare(const std::string& what, std::span<const float> got, std::span<const float> want, double atol,
                double rtol, size_t cols = 0);

// What a check is working on now (e.g. `word "unaffable"`), called in the check's child before
// each call of the student's code: when that call crashes, throws or runs past the time limit,
// the failure names it ("... while working on word "unaffable""). The text goes to a page the
// grader shares with the child, so it survives the child's crash; at most 400 bytes are kept.
void working_on(std::string_view what);

// One check as the grader printed it.
struct CheckResult {
  std::string name;
  bool pass = false;
  std::string detail;  // what was measured or found
  std::string hint;    // printed under a failed check
};

// The results in the format of Gradescope's autograder (results.json): `score` and `max_score`
// (one point per check), `output` (the summary and the [INFO] lines), `visibility`, and `tests`,
// each with `name`, `score`, `max_score`, `status` ("passed" or "failed") and `output` (the
// detail, and the hint when it failed).
std::string gradescope_results_json(const std::string& summary, const std::vector<CheckResult>& checks,
                                    const std::vector<std::string>& infos);

class Grader {
 public:
  // `results_json`: when not empty, finish() also writes the results there (gradescope_results_json),
  // atomically.
  explicit Grader(std::string lab, std::string results_json = {});
  // Runs `fn` in a child process. A signal, an exception, a non-finite result reported by fn
  // or running past `seconds` is a failed check with `hint` printed under it. Returns whether it
  // passed.
  bool check(const std::string& name, const std::string& hint, const std::function<Outcome()>& fn,
             unsigned seconds = 120);
  // A measurement for the handout's questions and plots, not graded: runs `fn` in a child like a
  // check and prints "[INFO] name: <what fn returns>" (or why it could not run). With
  // BERTLAB_LAB_CHECKS_ONLY=1 in the environment it only says it did not measure: the test
  // suite's runs that test the checks alone (labs/CMakeLists.txt) leave the measuring to the
  // page tests, which run the whole grader.
  void info(const std::string& name, const std::function<std::string()>& fn, unsigned seconds = 300);
  // A measurement that would give away the answer of a check that has not passed: prints
  // "[INFO] name: shown once the check 'until_check' passes" instead of measuring.
  void withheld(const std::string& name, const std::string& until_check);
  // A measurement this machine cannot make (e.g. bf16 on a CPU without native bf16), said before
  // any work starts: prints "[SKIP] name: reason" (also in the results file's output).
  void skipped(const std::string& name, const std::string& reason);
  // Prints "lab NAME: P of N checks passed", writes the results file if asked, and returns the
  // exit code: 0 only if all passed, 1 if a check failed, 2 if the results file could not be written.
  int finish() const;

 private:
  void print_info(const std::string& line);
  std::string lab_, results_json_;
  std::vector<CheckResult> checks_;
  std::vector<std::string> infos_;  // the [INFO] lines, for the results file
};

// Adds --json FILE (the results in Gradescope's format) to a grader's command line; a path that
// cannot be written is an error naming --json before any check runs.
void add_results_json_option(CLI::App& app, std::string& file);

// A lab's page of plots (a self-contained HTML file, report/chart.h). Checks run in separate
// processes, so each adds its sections as files under DIR/LAB.parts/; write() joins them, in
// the order added, into DIR/LAB.html (atomically) and returns its path.
class PlotPage {
 public:
  PlotPage(std::filesystem::path dir, std::string lab);  // in the grader's parent: clears old parts
  void add(const std::string& html) const;  // a heading, paragraph or chart (counted if an <svg class="chart">)
  std::filesystem::path write(const std::string& title) const;

 private:
  std::filesystem::path dir_;
  std::string lab_;
};

// Whether this CPU (under the ONEDNN_MAX_CPU_ISA cap, if set) multiplies bf16 natively: ""
// when it does, else why not (ops::bf16_unavailable_reason), for the graders' pre-checks.
std::string bf16_unavailable();

// The options of the graders that train or measure on the prepared corpus.
struct TrainingLabOptions {
  std::string data = "out/brown-128";  // prepared pretraining data
  std::string out = "out/labs";        // the plots page and the runs
  int64_t steps = 100;                 // training steps of the lab's runs
  bool quick = false;                  // the test suite's smaller inputs
  std::string results_json;            // --json: the results in Gradescope's format
};
// Adds --data, --out, --steps, --quick and --json to the grader's command line.
void add_training_lab_options(CLI::App& app, TrainingLabOptions& o, const std::string& steps_help,
                              const std::string& quick_help);

// Where the labs' data and outputs are, from the grader's location: build/labs/lab_X runs from
// anywhere; paths given on its command line win.
std::string source_dir();  // the checkout (compiled in)
std::string bertlab_binary();  // the bertlab CLI built beside the grader
// The shell words that start it: its quoted path, after the emulator's command line in a cross
// build (CMAKE_CROSSCOMPILING_EMULATOR, e.g. qemu-user).
std::string bertlab_command();

// --quick's training fixture: a vocabulary and pretraining shards of seq 32 prepared from the
// test corpus under `dir` (by the bertlab CLI), and a BERT-tiny config sized to that
// vocabulary (dir/config.json). Throws naming the log when preparing fails.
struct QuickFixture {
  std::filesystem::path config, data;
};
QuickFixture prepare_quick_fixture(const std::filesystem::path& dir);

}  // namespace bertlab::lab
