#pragma once
// The one error type of bertlab. Libraries throw it with context (file, field, tensor,
// expected vs found); only apps/ prints it and chooses the exit code.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <stdexcept>
#include <string>

namespace bertlab {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// check(cond, "expected hidden size {} , got {}", a, b): throws Error when cond is false.
template <typename... Args>
void check(bool cond, fmt::format_string<Args...> f, Args&&... args) {
  if (!cond) throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace bertlab
