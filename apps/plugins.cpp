#include "apps/plugins.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdio>

#include "base/error.h"

namespace bertlab::app {

namespace {
// A function-local list: registration runs during static initialisation, in any order.
std::vector<StartupHook>& hooks() {
  static std::vector<StartupHook> h;
  return h;
}
}  // namespace

bool register_startup_hook(StartupHook hook) {
  check(!has_startup_hook(hook.name), "startup hook '{}' registered twice", hook.name);
  hooks().push_back(std::move(hook));
  return true;
}

bool has_startup_hook(std::string_view name) {
  return std::any_of(hooks().begin(), hooks().end(), [&](const StartupHook& h) { return h.name == name; });
}

void run_startup_hooks() {
  for (const auto& h : hooks()) {
    h.run();
    if (!h.note.empty()) fmt::print(stderr, "bertlab: {}\n", h.note);
  }
}

}  // namespace bertlab::app
