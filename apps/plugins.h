#pragma once
// Code the bertlab binary runs at start that the apps layer does not name: a plugin linked into
// the binary (lab 2's seam, labs/kernel/plugin.cpp) registers itself from a static initialiser,
// and the build adds plugins to the binary through the BERTLAB_PLUGINS list (CMakeLists.txt),
// so neither main.cpp nor the bertlab target knows the labs.
#include <string>
#include <string_view>
#include <vector>

namespace bertlab::app {

struct StartupHook {
  std::string name;  // what `has_startup_hook` asks for
  std::string note;  // printed on stderr when it runs (what it changes)
  void (*run)();
};

// Returns true, for use in a static initialiser; a second hook of the same name is an error
// (two plugins claiming one seam).
bool register_startup_hook(StartupHook hook);
bool has_startup_hook(std::string_view name);
// Every registered hook, in registration order: its run, then its note.
void run_startup_hooks();

}  // namespace bertlab::app
