#pragma once
// Helpers shared by the data tests: a self-deleting temporary directory and a command runner.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <fmt/core.h>

namespace bertlab::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           fmt::format("bertlab-{}-{}-{}", tag, static_cast<long>(::getpid()), counter++);
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// Runs a shell command; returns its exit status.
inline int run_shell(const std::string& command) {
  int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline const std::filesystem::path& data_dir() {
  static const std::filesystem::path dir = std::filesystem::path(BERTLAB_SOURCE_DIR) / "tests" / "data";
  return dir;
}

}  // namespace bertlab::test
