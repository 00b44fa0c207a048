// bertlab lab list | check NAME: runs a teaching lab's grader (labs/README.md). The graders
// are separate programs (build/labs/lab_NAME, built on the student's file with
// -DBERTLAB_LABS=ON); this command finds the one beside this binary and runs it. A grader older
// than the lab's sources (the student edited student.cpp and did not rebuild) would grade the
// old code: it is rebuilt first, in the build directory this binary was built in.
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include "apps/commands.h"
#include "apps/plugins.h"
#include "base/enum_table.h"
#include "base/error.h"
#include "base/file_util.h"

namespace bertlab::app {

namespace {

// How a lab's grader is built: the CMake options it needs (lab 2 also routes bertlab's own
// layernorm to the student's file).
#define BERTLAB_LAB_BUILDS(X)                          \
  X(labs, "labs", "-DBERTLAB_LABS=ON")                 \
  X(labs_and_kernel, "labs_and_kernel", "-DBERTLAB_LABS=ON -DBERTLAB_LAB_KERNEL=ON")
BERTLAB_ENUM(LabBuild, uint8_t, BERTLAB_LAB_BUILDS)
// The startup hook lab 2's seam registers when it is linked in (labs/kernel/plugin.cpp).
constexpr const char* kLabKernelHook = "lab-kernel";

struct LabInfo {
  const char* name;
  const char* title;
  LabBuild build;  // the CMake options its grader needs
};

constexpr std::array kLabs{
    LabInfo{"profile", "1. Where the time goes in BERT training", LabBuild::labs},
    LabInfo{"kernel", "2. Write a kernel: layernorm forward and backward", LabBuild::labs_and_kernel},
    LabInfo{"arrangement", "3. Data arrangement for accelerators (RWMA and BWMA)", LabBuild::labs},
    LabInfo{"precision", "4. Mixed precision and memory", LabBuild::labs},
    LabInfo{"allreduce", "5. Data-parallel training and the ring allreduce", LabBuild::labs},
    LabInfo{"tokenize", "6. Tokenization and the pretraining data", LabBuild::labs},
};

const char* cmake_options(LabBuild b) {
#define BERTLAB_LAB_BUILD_OPTIONS(id, name, options) options,
  static constexpr std::array<const char*, enum_count<LabBuild>> kOptions{BERTLAB_LAB_BUILDS(BERTLAB_LAB_BUILD_OPTIONS)};
#undef BERTLAB_LAB_BUILD_OPTIONS
  return kOptions.at(static_cast<size_t>(b));
}

std::string lab_list() {
  std::string s;
  for (const auto& l : kLabs) s += fmt::format("  {:<12} {}\n", l.name, l.title);
  return s;
}

std::filesystem::path self_dir() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path();
}

// The lab's sources: the C++ files in labs/NAME/ (the student's file, the grader and lab.h; not
// solution/).
std::vector<std::filesystem::path> lab_sources(const LabInfo& lab) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(BERTLAB_SOURCE_DIR) / "labs" / lab.name, ec)) {
    const auto ext = e.path().extension();
    if (e.is_regular_file() && (ext == ".cpp" || ext == ".h")) files.push_back(e.path());
  }
  return files;
}

// Rebuilds the grader when a source of the lab is newer than it. Rebuilding, not refusing: a
// student who runs `bertlab lab check` after an edit means "grade what I wrote"; a refusal would
// only make them type the build command we know. Refuses (naming the command) only when this
// binary is not in the build directory it was built in (copied elsewhere).
void rebuild_if_stale(const LabInfo& lab, const std::filesystem::path& grader) {
  const auto newer = files_newer_than(grader, lab_sources(lab));
  if (newer.empty()) return;
  const std::filesystem::path build_dir = BERTLAB_BUILD_DIR;
  const std::string target = std::string("lab_") + lab.name;
  const std::string command = fmt::format("cmake --build '{}' -j2 --target {}", build_dir.string(), target);
  std::error_code ec;
  const bool in_build_dir = std::filesystem::exists(build_dir / "CMakeCache.txt", ec) &&
                            std::filesystem::equivalent(self_dir(), build_dir, ec);
  check(in_build_dir, "{} is newer than lab '{}''s grader {}: rebuild it first:\n  {}", newer.front().string(),
        lab.name, grader.string(), command);
  fmt::print("{} changed since the grader was built: rebuilding it ({})\n", newer.front().string(), command);
  std::fflush(stdout);
  const std::string run = fmt::format("'{}' --build '{}' -j2 --target {}", BERTLAB_CMAKE, build_dir.string(), target);
  const int rc = std::system(run.c_str());
  check(rc == 0, "rebuilding lab '{}' failed (the compiler's messages are above): fix {} and run bertlab lab check {} again",
        lab.name, newer.front().string(), lab.name);
  check(files_newer_than(grader, lab_sources(lab)).empty(),
        "lab '{}''s grader {} is still older than {} after `{}`", lab.name, grader.string(), newer.front().string(),
        command);
}

[[noreturn]] void run_grader(const LabInfo& lab, const std::vector<std::string>& args) {
  const auto grader = self_dir() / "labs" / (std::string("lab_") + lab.name);
  const std::string configure =
      fmt::format("cmake -S . -B build {} && cmake --build build -j2", cmake_options(lab.build));
  check(std::filesystem::exists(grader), "lab '{}' is not built ({} is missing): configure with {}", lab.name,
        grader.string(), configure);
  check(lab.build != LabBuild::labs_and_kernel || has_startup_hook(kLabKernelHook),
        "lab '{}' needs bertlab itself built with the student's kernel: configure with {}", lab.name, configure);
  rebuild_if_stale(lab, grader);
  std::vector<std::string> argv_s{grader.string()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(grader.c_str(), argv.data());
  fail("could not run the grader {}: {}", grader.string(), std::strerror(errno));
}

}  // namespace

void add_lab_command(CLI::App& root) {
  auto* lab = root.add_subcommand("lab", "Teaching labs: list them, or run a lab's grader");
  lab->require_subcommand(1);
  lab->add_subcommand("list", "List the labs")->callback([] { fmt::print("labs (labs/README.md):\n{}", lab_list()); });
  auto* check_cmd = lab->add_subcommand("check", "Run a lab's grader: each check with PASS or FAIL and a hint");
  auto name = std::make_shared<std::string>();
  auto args = std::make_shared<std::vector<std::string>>();
  auto json = std::make_shared<std::string>();
  check_cmd->add_option("name", *name, "The lab (bertlab lab list)")->required();
  check_cmd->add_option("--json", *json,
                        "Also write the results to FILE in the format of Gradescope's autograder (results.json; "
                        "scripts/lab_autograder.sh packs a lab for Gradescope)");
  check_cmd->add_option("args", *args, "Options passed to the grader (after --), e.g. -- --help");
  check_cmd->callback([name, args, json] {
    check_output_writable(*json, "--json");  // before minutes of grading
    std::vector<std::string> grader_args = *args;
    if (!json->empty()) grader_args.insert(grader_args.begin(), {"--json", *json});
    for (const auto& l : kLabs)
      if (*name == l.name) run_grader(l, grader_args);
    fail("unknown lab '{}'; the labs are:\n{}", *name, lab_list());
  });
}

}  // namespace bertlab::app
