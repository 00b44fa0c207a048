#!/usr/bin/env bash
# Runs every libFuzzer harness of fuzz/ for SECONDS each (ASan + UBSan), from the seed corpora
# of scripts/fuzz_seeds.sh, and prints the executions of each. Crash reproducers are left in
# build-fuzz/crashes/<harness>/; every one becomes a regression test in tests/.
#   scripts/fuzz.sh SECONDS [HARNESS...]   run (harnesses one after the other)
#   scripts/fuzz.sh --summary              executions per harness summed over fuzz/runs.tsv
# Every run appends a line to fuzz/runs.tsv (committed: the executions summed over sessions):
# date, harness, seconds, executions, executions per second, reproducers found, commit.
# Installs the fuzz group (scripts/setup.sh fuzz) and builds build-fuzz (clang, -DBERTLAB_FUZZ=ON) first.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
runs=fuzz/runs.tsv
if [ "${1:-}" = "--summary" ]; then
  /usr/bin/python3 - "$runs" <<'PY'
import collections, sys
total = collections.defaultdict(lambda: [0, 0.0, 0])
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if f[0] == "date": continue
    t = total[f[1]]; t[0] += int(f[3]); t[1] += float(f[2]); t[2] += int(f[5])
for h, (execs, secs, found) in sorted(total.items()):
    print(f"fuzz: {h}: {execs} executions in {secs:.0f} s ({execs / max(secs, 1):.0f}/s), {found} reproducers; "
          f"{'10M reached' if execs >= 10_000_000 else f'{(10_000_000 - execs) / max(execs / max(secs, 1), 1) / 3600:.1f} h more to 10M'}")
PY
  exit 0
fi
seconds=${1:?usage: scripts/fuzz.sh SECONDS [HARNESS...] | --summary}
shift
scripts/setup.sh fuzz >/dev/null || exit 2  # clang, its sanitizer runtimes and libomp
launcher=(); command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DBERTLAB_FUZZ=ON \
  -DBERTLAB_BUILD_TESTS=OFF -DBERTLAB_NATIVE=OFF "${launcher[@]}" >/dev/null || exit 2
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=($(cd fuzz && ls fuzz_*.cpp | sed 's/\.cpp$//'))
cmake --build build-fuzz -j"${JOBS:-2}" --target "${harnesses[@]}" 2>&1 | grep -E "error|warning: unused" | head -20
for h in "${harnesses[@]}"; do [ -x "build-fuzz/fuzz/$h" ] || { echo "fuzz: $h did not build" >&2; exit 2; }; done
[ -d build-fuzz/seeds ] || scripts/fuzz_seeds.sh build-fuzz/seeds build/bertlab || exit 2
export FUZZ_DATA_DIR=$root/build-fuzz/seeds/data
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
[ -f "$runs" ] || printf 'date\tharness\tseconds\texecutions\texec_per_s\treproducers\tcommit\n' >"$runs"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
total_crashes=0
for h in "${harnesses[@]}"; do
  name=${h#fuzz_}
  corpus=build-fuzz/corpus/$name crashes=build-fuzz/crashes/$name
  mkdir -p "$corpus" "$crashes" "build-fuzz/seeds/$name"
  log=build-fuzz/$h.log
  before=$(ls "$crashes" | wc -l) start=$(date +%s)
  # -rss_limit_mb: a reader must not need more than 2 GB for any input; -timeout: nor 10 s.
  build-fuzz/fuzz/$h "$corpus" "build-fuzz/seeds/$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -artifact_prefix="$crashes/" -print_final_stats=1 >"$log" 2>&1
  status=$?
  execs=$(grep -o "stat::number_of_executed_units: *[0-9]*" "$log" | grep -o "[0-9]*$")
  took=$(( $(date +%s) - start ))
  found=$(( $(ls "$crashes" | wc -l) - before ))
  total_crashes=$((total_crashes + $(ls "$crashes" | wc -l)))
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$h" "$took" "${execs:-0}" \
    "$(( ${execs:-0} / (took > 0 ? took : 1) ))" "$found" "$commit" >>"$runs"
  echo "fuzz: $h: ${execs:-0} executions in ${took}s, exit $status, $found new reproducers in $crashes"
done
echo "fuzz: $total_crashes reproducers in build-fuzz/crashes (each must become a regression test, then be removed)"
[ "$total_crashes" -eq 0 ]
