#!/usr/bin/env bash
# Runs every libFuzzer harness of fuzz/ for SECONDS each (ASan + UBSan), from the seed corpora
# of scripts/fuzz_seeds.sh, and prints the executions of each. Crash reproducers are left in
# build-fuzz/crashes/<harness>/; every one becomes a regression test in tests/.
#   scripts/fuzz.sh SECONDS [HARNESS...]   run (harnesses one after the other)
#   scripts/fuzz.sh --summary              executions per harness summed over fuzz/runs.tsv
#   scripts/fuzz.sh --cost RUNS [HARNESS...]  the cost of an execution: RUNS executions from the
#     seeds alone (-seed=1, an empty corpus), the CPU microseconds per execution and the coverage
#     reached (libFuzzer's cov and ft); not logged in runs.tsv. CPU time rather than wall time,
#     so that a shared machine's load changes the figure less (it still does, by tens of percent).
# Every run appends a line to fuzz/runs.tsv (committed: the executions summed over sessions):
# date, harness, seconds, executions, executions per second, reproducers found, commit, and the
# CPU seconds the harness used (user + system: on a shared machine the wall-clock rate says more
# about the load than about the harness; rows before this column have none).
# Installs the fuzz group (scripts/setup.sh fuzz) and builds build-fuzz (clang, -DBERTLAB_FUZZ=ON) first.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
runs=fuzz/runs.tsv
if [ "${1:-}" = "--summary" ]; then
  /usr/bin/python3 - "$runs" <<'PY'
import collections, sys
total = collections.defaultdict(lambda: [0, 0.0, 0, 0, 0.0])
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if f[0] == "date": continue
    t = total[f[1]]; t[0] += int(f[3]); t[1] += float(f[2]); t[2] += int(f[5])
    if len(f) > 7 and float(f[7]) > 0: t[3] += int(f[3]); t[4] += float(f[7])  # runs with their CPU time
for h, (execs, secs, found, cpu_execs, cpu) in sorted(total.items()):
    per_cpu = f", {cpu_execs / cpu:.0f} per CPU second" if cpu > 0 else ""
    left = 10_000_000 - execs
    # The hours left at the wall-clock rate, and (where runs have their CPU time) the CPU hours:
    # on a shared machine the first measures the load of the runs so far.
    more = f"{left / max(execs / max(secs, 1), 1) / 3600:.1f} h" + (f" ({left / (cpu_execs / cpu) / 3600:.1f} CPU h)" if cpu > 0 else "")
    print(f"fuzz: {h}: {execs} executions in {secs:.0f} s ({execs / max(secs, 1):.0f}/s{per_cpu}), {found} reproducers; "
          f"{'10M reached' if left <= 0 else more + ' more to 10M'}")
PY
  exit 0
fi
cost_runs=0
if [ "${1:-}" = "--cost" ]; then cost_runs=${2:?usage: scripts/fuzz.sh --cost RUNS [HARNESS...]}; shift 2; set -- 0 "$@"; fi
seconds=${1:?usage: scripts/fuzz.sh SECONDS [HARNESS...] | --summary | --cost RUNS [HARNESS...]}
shift
scripts/setup.sh fuzz >/dev/null || exit 2  # clang, its sanitizer runtimes and libomp
launcher=(); command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DBERTLAB_FUZZ=ON \
  -DBERTLAB_BUILD_TESTS=OFF -DBERTLAB_NATIVE=OFF "${launcher[@]}" >/dev/null || exit 2
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=($(cd fuzz && ls fuzz_*.cpp | sed 's/\.cpp$//'))
cmake --build build-fuzz -j"${JOBS:-2}" --target "${harnesses[@]}" 2>&1 | grep -E "error|warning: unused" | head -20
for h in "${harnesses[@]}"; do [ -x "build-fuzz/fuzz/$h" ] || { echo "fuzz: $h did not build" >&2; exit 2; }; done
# (again when scripts/fuzz_seeds.sh changed since they were made)
[ -d build-fuzz/seeds ] && [ build-fuzz/seeds -nt scripts/fuzz_seeds.sh ] || scripts/fuzz_seeds.sh build-fuzz/seeds build/bertlab || exit 2
export FUZZ_DATA_DIR=$root/build-fuzz/seeds/data
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
[ -f "$runs" ] || printf 'date\tharness\tseconds\texecutions\texec_per_s\treproducers\tcommit\tcpu_seconds\n' >"$runs"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
# The longest input each harness tries (-max_len): a little above its largest seed that is a
# whole valid file, so every seed is fuzzed unclipped; beyond that, longer inputs only cost
# time (the readers' limits on size are tested in tests/, not by the fuzzer). 65536 for every
# harness made tokenizer and vocab inputs 100x their seeds (issue 14: 93 and 330 inputs/s).
max_len() {
  case $1 in
    fuzz_graph) echo 32768 ;;                     # micro_infer.json 16 kB (micro_train 69 kB: clipped)
    fuzz_safetensors) echo 16384 ;;               # the micro model 6.6 kB, its optimizer state 12.9 kB
    fuzz_machine) echo 8192 ;;                    # machine.json 5.5 kB
    fuzz_shard | fuzz_task_data | fuzz_vocab) echo 4096 ;;  # shards of 4 instances 0.4 kB, files < 0.5 kB
    fuzz_config | fuzz_infer_input | fuzz_meta | fuzz_system | fuzz_trainer_state) echo 4096 ;;  # JSON < 1 kB
    fuzz_tokenizer) echo 2048 ;;                  # lines < 0.4 kB
    *) echo 4096 ;;
  esac
}
# fuzz_meta writes its prepared directory under TMPDIR: memory, not the disk, when there is
# /dev/shm; one directory for this run, removed at the end.
scratch=$(mktemp -d "$( [ -w /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/bertlab_fuzz.XXXXXX") || exit 2
trap 'rm -rf "$scratch"' EXIT
export TMPDIR=$scratch
if [ "$cost_runs" -gt 0 ]; then
  for h in "${harnesses[@]}"; do
    corpus=$scratch/cost_corpus_$h log=build-fuzz/$h.cost.log crashes=build-fuzz/crashes/${h#fuzz_}
    mkdir -p "$corpus" "$crashes"
    TIMEFORMAT='%U %S'
    { time build-fuzz/fuzz/$h "$corpus" "build-fuzz/seeds/${h#fuzz_}" -seed=1 -runs="$cost_runs" -timeout=10 \
      -rss_limit_mb=2048 -max_len="$(max_len "$h")" -artifact_prefix="$crashes/" -print_final_stats=1 >"$log" 2>&1; } 2>"$log.cpu"
    execs=$(grep -o "stat::number_of_executed_units: *[0-9]*" "$log" | grep -o "[0-9]*$")
    awk -v h="$h" -v n="${execs:-0}" -v cov="$(grep DONE "$log" | grep -oE "cov: [0-9]+ ft: [0-9]+ corp: [^ ]+")" \
      'END { s = $1 + $2; printf "fuzz cost: %s: %d executions in %.2f CPU s, %.0f us each; %s\n", h, n, s, n ? 1e6 * s / n : 0, cov }' "$log.cpu"
    rm -rf "$corpus"
  done
  exit 0
fi
total_crashes=0
for h in "${harnesses[@]}"; do
  name=${h#fuzz_}
  corpus=build-fuzz/corpus/$name crashes=build-fuzz/crashes/$name
  mkdir -p "$corpus" "$crashes" "build-fuzz/seeds/$name"
  log=build-fuzz/$h.log
  before=$(ls "$crashes" | wc -l) start=$(date +%s)
  # -rss_limit_mb: a reader must not need more than 2 GB for any input; -timeout: nor 10 s.
  TIMEFORMAT='%U %S'  # the CPU seconds of the run, from bash's `time`
  { time build-fuzz/fuzz/$h "$corpus" "build-fuzz/seeds/$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len="$(max_len "$h")" -artifact_prefix="$crashes/" -print_final_stats=1 >"$log" 2>&1; } 2>"build-fuzz/$h.cpu"
  status=$?
  execs=$(grep -o "stat::number_of_executed_units: *[0-9]*" "$log" | grep -o "[0-9]*$")
  took=$(( $(date +%s) - start ))
  cpu=$(awk 'END { printf "%.1f", $1 + $2 }' "build-fuzz/$h.cpu" 2>/dev/null)
  found=$(( $(ls "$crashes" | wc -l) - before ))
  total_crashes=$((total_crashes + $(ls "$crashes" | wc -l)))
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$h" "$took" "${execs:-0}" \
    "$(( ${execs:-0} / (took > 0 ? took : 1) ))" "$found" "$commit" "${cpu:-0}" >>"$runs"
  echo "fuzz: $h: ${execs:-0} executions in ${took}s (${cpu:-?} CPU s), exit $status, $found new reproducers in $crashes"
done
echo "fuzz: $total_crashes reproducers in build-fuzz/crashes (each must become a regression test, then be removed)"
[ "$total_crashes" -eq 0 ]
