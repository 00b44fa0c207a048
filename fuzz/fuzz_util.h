#pragma once
// Shared by the libFuzzer harnesses: the input as a file (most readers take a path), and the
// rule that a bertlab::Error is the expected answer to bad input (anything else -- another
// exception, a crash, a sanitizer report, a hang -- is a finding).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "base/error.h"

namespace bertlab::fuzz {

// A directory of this process under $TMPDIR (or /tmp), created once.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("bertlab_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::filesystem::path write_input(const std::string& name, const uint8_t* data, size_t size) {
  const auto file = scratch_dir() / name;
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return file;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs f; bertlab::Error is the clean refusal of bad input.
template <typename F>
int expect_clean(F&& f) {
  try {
    f();
  } catch (const bertlab::Error&) {
  }
  return 0;
}

}  // namespace bertlab::fuzz
