#!/usr/bin/env bash
# The Catch2 suite under AddressSanitizer and UndefinedBehaviorSanitizer (issue 14): builds
# build-asan (-DBERTLAB_SANITIZE=ON, GCC) and runs every ctest test in it. Not in .ci/run: the
# sanitizer build alone takes longer than CI's budget on 2 cores (docs/fuzzing.md).
#   scripts/sanitize.sh [CTEST ARGS...]
# ASan returns null for impossible allocations (as in the fuzz harnesses), so the tests of
# huge sizes see bertlab's own "out of memory" error; leaks inside OpenMPI are suppressed
# (tests/sanitizer/lsan.supp).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
launcher=(); command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBERTLAB_SANITIZE=ON "${launcher[@]}" >/dev/null
cmake --build build-asan -j"$(nproc)" 2>&1 | grep -E "error" || true
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/sanitizer/lsan.supp:print_suppressions=0}
ctest --test-dir build-asan --output-on-failure -j"$(nproc)" "$@"
