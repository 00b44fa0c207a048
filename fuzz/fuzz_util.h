#pragma once
// Shared by the libFuzzer harnesses: the rule that a bertlab::Error is the expected answer to
// bad input (anything else -- another exception, a crash, a sanitizer report, a hang -- is a
// finding). The harnesses call the readers' in-memory entry points (the file functions open
// the file, read it and call the same code), so no input touches the disk.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
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
