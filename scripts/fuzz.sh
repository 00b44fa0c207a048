#!/usr/bin/env bash
# Runs every libFuzzer harness of fuzz/ for SECONDS each (ASan + UBSan), from the seed corpora
# of scripts/fuzz_seeds.sh, and prints the executions of each. Crash reproducers are left in
# build-fuzz/crashes/<harness>/; every one becomes a regression test in tests/.
#   scripts/fuzz.sh SECONDS [HARNESS...]
# Installs the fuzz group (scripts/setup.sh fuzz) and builds build-fuzz (clang, -DBERTLAB_FUZZ=ON) first.
set -uo pipefail
seconds=${1:?usage: scripts/fuzz.sh SECONDS [HARNESS...]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh fuzz >/dev/null || exit 2  # clang, its sanitizer runtimes and libomp
launcher=(); command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DBERTLAB_FUZZ=ON \
  -DBERTLAB_BUILD_TESTS=OFF -DBERTLAB_NATIVE=OFF "${launcher[@]}" >/dev/null || exit 2
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=($(cd fuzz && ls fuzz_*.cpp | sed 's/\.cpp$//'))
cmake --build build-fuzz -j"${JOBS:-2}" --target "${harnesses[@]}" 2>&1 | grep -E "error|warning: unused" | head -20
[ -d build-fuzz/seeds ] || scripts/fuzz_seeds.sh build-fuzz/seeds build/bertlab || exit 2
export FUZZ_DATA_DIR=$root/build-fuzz/seeds/data
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
total_crashes=0
for h in "${harnesses[@]}"; do
  name=${h#fuzz_}
  corpus=build-fuzz/corpus/$name crashes=build-fuzz/crashes/$name
  mkdir -p "$corpus" "$crashes"
  log=build-fuzz/$h.log
  # -rss_limit_mb: a reader must not need more than 2 GB for any input; -timeout: nor 10 s.
  build-fuzz/fuzz/$h "$corpus" "build-fuzz/seeds/$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -artifact_prefix="$crashes/" -print_final_stats=1 >"$log" 2>&1
  status=$?
  execs=$(grep -o "stat::number_of_executed_units: *[0-9]*" "$log" | grep -o "[0-9]*$")
  found=$(ls "$crashes" | wc -l)
  total_crashes=$((total_crashes + found))
  echo "fuzz: $h: ${execs:-0} executions in ${seconds}s, exit $status, $found crash/timeout/oom reproducers in $crashes"
done
echo "fuzz: $total_crashes reproducers in total"
[ "$total_crashes" -eq 0 ]
