#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <exception>

#include "ops/isa.h"

// Catch2's runner, after checking the ISA cap (ONEDNN_MAX_CPU_ISA): a bad value ends the run
// with the error instead of failing every test that touches a kernel.
int main(int argc, char* argv[]) {
  try {
    (void)bertlab::ops::active_isa();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bertlab_tests: %s\n", e.what());
    return 2;
  }
  return Catch::Session().run(argc, argv);
}
