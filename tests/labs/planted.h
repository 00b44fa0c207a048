#pragma once
// The labs' planted-bug tests (labs/CMakeLists.txt bertlab_add_planted_bug): each lab's solution
// with bugs a student might write, switched on one at a time by the environment variable
// BERTLAB_LAB_PLANTED_BUG. ctest runs the grader once per bug and expects exactly the check
// that should catch it to fail, with no answer in its output.
#include <cstdlib>
#include <string_view>

namespace bertlab::lab::planted {

inline bool bug(std::string_view name) {
  const char* on = std::getenv("BERTLAB_LAB_PLANTED_BUG");
  return on != nullptr && name == on;
}

}  // namespace bertlab::lab::planted
