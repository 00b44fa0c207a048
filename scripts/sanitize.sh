#!/usr/bin/env bash
# The sanitizers (issue 14).
#   scripts/sanitize.sh [asan] [CTEST ARGS...]   the Catch2 suite under AddressSanitizer and
#       UndefinedBehaviorSanitizer: builds build-asan (-DBERTLAB_SANITIZE=ON, GCC) and runs every
#       ctest test in it.
#   scripts/sanitize.sh tsan                     ThreadSanitizer on the threaded code: builds
#       build-tsan (-DBERTLAB_TSAN=ON, clang, LLVM's libomp) and runs bertlab's threaded commands
#       (docs/fuzzing.md, "Threads").
# Not in .ci/run: a sanitizer build alone takes longer than CI's budget on 2 cores
# (docs/fuzzing.md). Run it under `nice -n 10` on a shared machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mode=asan
case ${1:-} in asan | tsan) mode=$1; shift ;; esac
launcher=(); command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
jobs=${JOBS:-$(nproc)}
if [ "$mode" = tsan ]; then
  exec scripts/tsan_run.sh "$@"
fi
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBERTLAB_SANITIZE=ON "${launcher[@]}" >/dev/null
if ! cmake --build build-asan -j"$jobs" >build-asan/build.log 2>&1; then
  grep -E "error" build-asan/build.log | head -20; echo "sanitize: the build failed (build-asan/build.log)" >&2; exit 2
fi
# ASan returns null for impossible allocations (as in the fuzz harnesses), so the tests of
# huge sizes see bertlab's own "out of memory" error; leaks inside OpenMPI are suppressed by
# library name (tests/sanitizer/lsan.supp).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/sanitizer/lsan.supp:print_suppressions=0}
# The tests that start `mpirun` ranks (their names hold "MPI ranks") run apart, with full
# unwinding of allocation stacks (fast_unwind_on_malloc=0). OpenMPI's components are built
# without frame pointers, so ASan's fast unwinder stops one frame into them, in an `<unknown
# module>` (a component dlopen'ed by OpenMPI), and the blocks OpenMPI keeps until exit cannot be
# matched to its libraries. With full stacks every one of them has a frame in libmpi,
# libopen-rte, libopen-pal or libevent (measured 2026-11-30: 3,343 blocks, 116 kB per rank of a
# 2-step training run, all suppressed by lsan.supp), while a leak of bertlab's own (no OpenMPI
# frame) is still reported. Leak detection stays on everywhere; only these tests pay for the
# slow unwinder.
mpi_tests="MPI ranks"
status=0
ctest --test-dir build-asan --output-on-failure -j"$jobs" -E "$mpi_tests" "$@" || status=1
ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0" \
  ctest --test-dir build-asan --output-on-failure --no-tests=error -R "$mpi_tests" "$@" || status=1
exit $status
