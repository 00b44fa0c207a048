#!/usr/bin/env bash
# The labs' numbers that depend on the CPU kind, measured by the tools on this machine at every
# instruction-set level it allows, and each lab's time end to end, written to
# docs/labs/ranges.md (the handouts link it; nothing in it is typed in). One command, for an idle
# machine:
#
#   scripts/lab_ranges.sh            # the whole run: per level a calibration, 6 benches and every
#                                    # lab twice (each lab's full mode aims at under 5 minutes)
#   scripts/lab_ranges.sh --quick    # a smoke run of every step (short measurements, the labs'
#                                    # --quick mode only), written to BUILD/lab_ranges_quick.md
#
# Options: --build DIR (default build), --repeats N (default 3), --out FILE, --labs a,b,...
# (default all six), --levels AVX2,... (default every CPU kind below and this CPU's own level).
#
# The CPU kinds, each measured as this machine allows (tests/isa_cap.sh decides):
#   AVX2, AVX512_CORE, AVX512_CORE_BF16, AVX512_CORE_AMX: uncapped when it is this CPU's own level,
#   capped with ONEDNN_MAX_CPU_ISA when it is a lower one, and a row saying "not measured: no such
#   CPU" when this CPU lacks it; this CPU's own level gets a row of its own when it is none of them.
# Per level:
#   `bertlab calibrate` (--passes REPEATS: each figure the best of them): the square GEMM's peak,
#     fp32 and (with native bf16) bf16, and the DRAM triad bandwidth (lab 1, step 1; lab 2);
#   `bertlab profile` of BERT-mini (accum 1 and 4) and BERT-base training, REPEATS times each: the
#     GEMMs' and the optimizer's shares of the measured step (lab 1, steps 2 and 5);
#   `bertlab bench` of BERT-mini training at batch 8, seq 128, fp32 and (native bf16 only) bf16,
#     REPEATS times each: a range is the lowest to the highest (labs 1 and 4);
#   every lab's grader on the teachers' solution (build/labs/lab_NAME_solution, built here if
#     missing) with --quick and, unless --quick, in full mode as a student runs it (labs 2, 4 and
#     5 train on out/brown-128, prepared here as labs/kernel/README.md step 4 does if missing),
#     timed end to end.
set -euo pipefail
trap 'echo "error: lab_ranges.sh: line $LINENO failed: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
source tests/isa_cap.sh

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
quick=0 build=build repeats=3 out="" labs="profile,kernel,arrangement,precision,allreduce,tokenize"
levels="AVX2,AVX512_CORE,AVX512_CORE_BF16,AVX512_CORE_AMX" levels_given=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --build) build="${2:?--build needs a directory}"; shift ;;
    --repeats) repeats="${2:?--repeats needs a number}"; shift ;;
    --out) out="${2:?--out needs a file}"; shift ;;
    --labs) labs="${2:?--labs needs a list, e.g. profile,kernel}"; shift ;;
    --levels) levels="${2:?--levels needs a list, e.g. AVX2,AVX512_CORE}" levels_given=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "error: lab_ranges.sh: unknown argument '$1' (expected --quick, --build DIR, --repeats N, --out FILE, --labs LIST, --levels LIST)" >&2; exit 2 ;;
  esac
  shift
done
[[ "$repeats" =~ ^[1-9][0-9]*$ ]] || { echo "error: lab_ranges.sh: --repeats must be a positive whole number, got '$repeats'" >&2; exit 2; }
for lab in ${labs//,/ }; do
  [ -f "labs/$lab/lab.cmake" ] || { echo "error: lab_ranges.sh: --labs: no lab '$lab' (labs/*/lab.cmake)" >&2; exit 2; }
done
if [ "$quick" = 1 ]; then
  repeats=1
  out="${out:-$build/lab_ranges_quick.md}"
else
  out="${out:-docs/labs/ranges.md}"
fi
bertlab="$build/bertlab"
[ -f "$build/CMakeCache.txt" ] || { echo "error: $build is not a CMake build directory: build first (scripts/build.sh)" >&2; exit 1; }
grep -q '^BERTLAB_BUILD_TESTS:BOOL=ON' "$build/CMakeCache.txt" ||
  { echo "error: $build was configured with -DBERTLAB_BUILD_TESTS=OFF: the labs' solution graders are test targets" >&2; exit 1; }
targets=(bertlab)
for lab in ${labs//,/ }; do targets+=("lab_${lab}_solution"); done
echo "lab_ranges: building ${targets[*]}" >&2
nice -n 10 cmake --build "$build" -j2 --target "${targets[@]}" >/dev/null
scratch="$(mktemp -d "${TMPDIR:-/tmp}/lab_ranges.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT

# --- measuring at one level: "native" (uncapped) or a cap --------------------------------------
run_at() {  # LEVEL COMMAND...: COMMAND on 2 threads, capped at LEVEL unless it is native
  local level="$1"
  shift
  if [ "$level" = native ]; then
    env -u ONEDNN_MAX_CPU_ISA -u DNNL_MAX_CPU_ISA OMP_NUM_THREADS=2 "$@"
  else
    env -u DNNL_MAX_CPU_ISA ONEDNN_MAX_CPU_ISA="$level" OMP_NUM_THREADS=2 "$@"
  fi
}
bench() {  # LEVEL PRECISION -> sequences/s (nothing when it failed)
  local runs=3
  [ "$quick" = 1 ] && runs=1
  run_at "$1" "$bertlab" bench --config configs/bert-mini.json --mode train --batch 8 --seq 128 \
    --precision "$2" --runs "$runs" --warmup 1 --no-peak 2>&1 |
    sed -n 's/.*throughput: \([0-9.]*\) sequences\/s.*/\1/p' || true
}
range() {  # numbers on stdin -> "lo to hi", or "failed" when there are none; UNIT after each
  tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -g | sed -n '1p;$p' | paste -sd' ' |
    awk -v u="${1:-}" 'NF { printf "%.1f%s to %.1f%s", $1, u, $NF, u; found = 1 } END { if (!found) printf "failed" }'
}
ratio_range() {  # "a1 a2 .." "b1 b2 ..": lowest b/a to highest b/a over all pairs
  awk -v a="$1" -v b="$2" 'BEGIN { n = split(a, x, " "); m = split(b, y, " "); lo = 1e9; hi = 0;
    if (n == 0 || m == 0) { printf "failed"; exit }
    for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) { r = y[j] / x[i]; if (r < lo) lo = r; if (r > hi) hi = r }
    printf "%.2fx to %.2fx", lo, hi }'
}
calibrate_args=(--seconds "$([ "$quick" = 1 ] && echo 0.2 || echo 1)" --passes "$repeats")
calibrate() {  # LEVEL -> "fp32 peak|bf16 peak or -|DRAM triad|resident triad or -" from its machine.json
  local json="$scratch/machine-$1.json"
  if ! run_at "$1" "$bertlab" calibrate "${calibrate_args[@]}" --out "$json" >"$scratch/calibrate-$1.txt" 2>&1; then
    echo "lab_ranges: $1: calibrate failed: $(tail -n1 "$scratch/calibrate-$1.txt")" >&2
    echo "failed|failed|failed|failed"
    return
  fi
  /usr/bin/python3 - "$json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
peak, bw = m["gemm_peak_gflops"], m["bandwidth_gbs"]
bf16, resident = peak.get("bf16"), bw.get("triad_resident")  # resident: absent when it came out below DRAM
print(f'{peak["f32"]:.0f}|{"-" if bf16 is None else f"{bf16:.0f}"}|{bw["triad"]:.1f}|{"-" if resident is None else f"{resident:.0f}"}')
EOF
}
profile_shares() {  # LEVEL CONFIG BATCH ACCUM -> "GEMM % | optimizer %" of the measured step (lab 1)
  local runs=3
  [ "$quick" = 1 ] && runs=1
  run_at "$1" "$bertlab" profile --config "configs/$2.json" --mode train --batch "$3" --seq 128 --accum "$4" \
    --runs "$runs" --machine "$scratch/machine-$1.json" 2>&1 |
    awk '/GEMMs [0-9.]+% of the step/ { for (i = 1; i < NF; i++) if ($i == "GEMMs") g = $(i + 1) }
         /^ *optimizer update / { o = $4 }
         END { gsub("%", "", g); gsub("%", "", o); printf "%s|%s", g, o }' || true
}
shares_row() {  # LEVEL -> the cells of the shares table, REPEATS profiles of each case
  local mini_g="" base_g="" opt1="" opt4="" g o
  for _ in $(seq "$repeats"); do
    IFS='|' read -r g o <<<"$(profile_shares "$1" bert-mini 8 1)"
    mini_g+=" $g" opt1+=" $o"
    IFS='|' read -r g o <<<"$(profile_shares "$1" bert-mini 8 4)"
    opt4+=" $o"
    IFS='|' read -r g o <<<"$(profile_shares "$1" bert-base 4 1)"
    base_g+=" $g"
  done
  echo "$(range % <<<"$mini_g") | $(range % <<<"$base_g") | $(range % <<<"$opt1") | $(range % <<<"$opt4")"
}
time_lab() {  # LEVEL LAB MODE(quick|full) -> "N s" (and the exit status when the grader failed)
  local args=() dir="$scratch/$1-$2-$3" start rc
  [ "$3" = quick ] && args=(--quick)
  start=$(date +%s.%N)
  set +e
  run_at "$1" "$build/labs/lab_$2_solution" "${args[@]}" --out "$dir" >"$dir.log" 2>&1
  rc=$?
  set -e
  awk -v s="$start" -v e="$(date +%s.%N)" -v rc="$rc" \
    'BEGIN { t = e - s; printf (t < 1 ? "%.2f s" : t < 10 ? "%.1f s" : "%.0f s"), t; if (rc != 0) printf " (failed: exit %d)", rc }'
  [ "$rc" = 0 ] || echo "lab_ranges: $1: lab $2 ($3) exited $rc; its log: $(tail -n3 "$dir.log" | tr '\n' ' ')" >&2
}

kernel_speed() {  # LEVEL -> lab 2's [INFO] speed line of the solution's runs at LEVEL, as table cells
  local fwd="" bwd="" gbs="" line f
  for f in "$scratch/$1-kernel-"*.log; do
    [ -f "$f" ] || continue
    line="$(grep -m1 '^\[INFO\] speed against' "$f" || true)"
    fwd+=" $(sed -n 's/.*vs bertlab [0-9.]* ms: \([0-9.]*\)x; backward.*/\1/p' <<<"$line")"
    bwd+=" $(sed -n 's/.*backward [0-9.]* ms vs [0-9.]* ms: \([0-9.]*\)x.*/\1/p' <<<"$line")"
    gbs+=" $(sed -n 's/.*forward [0-9.]* ms (\([0-9.]*\) GB\/s).*/\1/p' <<<"$line")"
  done
  echo "$(range x <<<"$fwd") | $(range x <<<"$bwd") | $(range <<<"$gbs")"
}

# --- the data the training labs' full mode reads ----------------------------------------------
prepare_data() {
  [ -f out/brown-128/meta.json ] && return
  echo "lab_ranges: preparing out/brown-128 (labs/kernel/README.md, step 4)" >&2
  scripts/fetch_corpus.sh
  [ -f out/vocab/vocab.txt ] || "$bertlab" vocab --corpus brown --vocab-size 8000 --out out/vocab
  "$bertlab" prepare --corpus brown --vocab out/vocab --seq-len 128 --out out/brown-128
}
modes="quick"
if [ "$quick" = 0 ]; then
  modes="quick full"
  case ",$labs," in *,kernel,* | *,precision,* | *,allreduce,*) prepare_data ;; esac
fi

# --- the levels: each CPU kind as this machine allows, and its own level ----------------------
kind_name() {
  case "$1" in
    AVX2) echo "AVX2 only (most laptops before 2022, Zen 1-3)" ;;
    AVX512_CORE) echo "AVX-512 without bf16 (Skylake-X, Ice Lake)" ;;
    AVX512_CORE_BF16) echo "AVX-512 with bf16 (Cooper Lake, Zen 4)" ;;
    AVX512_CORE_AMX) echo "AMX (Sapphire Rapids and later)" ;;
    *) echo "this CPU's own level" ;;
  esac
}
own="$(isa_own_level "$bertlab")"
level_list="${levels//,/ }"
# Without --levels, this CPU's own level too when it is none of the kinds (e.g. AVX512_CORE_VNNI).
[ "$levels_given" = 1 ] || grep -qw -- "$own" <<<"$level_list" || level_list+=" $own"
cpu_rows="" share_rows="" time_header="| lab | mode |" time_rule="|---|---|" measured=() measured_caps=()
for cap in $level_list; do
  kind="$(kind_name "$cap")"
  case "$(isa_level "$bertlab" "$cap")" in
    missing)
      cpu_rows+="| $kind | \`$cap\` | not measured: no such CPU | | | | | | | | | |"$'\n'
      share_rows+="| $kind | \`$cap\` | not measured: no such CPU | | | |"$'\n'
      echo "lab_ranges: $cap: not measured: this CPU does not have it" >&2
      continue ;;
    own) level=native how="this CPU's own level, uncapped" ;;
    lower) level="$cap" how="capped (\`ONEDNN_MAX_CPU_ISA=$cap\`)" ;;
  esac
  echo "lab_ranges: $cap ($how): calibrate, profiles, bench" >&2
  bf16="$(run_at "$level" "$bertlab" isa | sed -n 's/^bf16: *//p')"
  IFS='|' read -r peak32 peak16 triad resident <<<"$(calibrate "$level")"
  fp32s="" bf16s=""
  for _ in $(seq "$repeats"); do fp32s+=" $(bench "$level" fp32)"; done
  if [ "$bf16" = native ]; then
    for _ in $(seq "$repeats"); do bf16s+=" $(bench "$level" bf16)"; done
    cpu_rows+="| $kind | \`$cap\` | $how | native | $peak32 | $peak16 | $triad | $resident | $(range <<<"$fp32s") | $(range <<<"$bf16s") | $(ratio_range "$fp32s" "$bf16s") | $(ratio_range "$bf16s" "$fp32s") |"$'\n'
  else
    cpu_rows+="| $kind | \`$cap\` | $how | none: the graders skip bf16 ([SKIP]) | $peak32 | skipped | $triad | $resident | $(range <<<"$fp32s") | skipped | skipped | skipped |"$'\n'
  fi
  shares="$(shares_row "$level")"
  share_rows+="| $kind | \`$cap\` | $shares |"$'\n'
  echo "lab_ranges: $cap: shares (GEMM mini, GEMM base, optimizer accum 1, accum 4): $shares" >&2
  echo "lab_ranges: $cap: calibrate fp32 $peak32, bf16 $peak16 GFLOP/s, triad $triad (resident $resident) GB/s; bench fp32$fp32s; bf16${bf16s:- skipped}" >&2
  time_header+=" \`$cap\` |"
  time_rule+="---|"
  measured+=("$level") measured_caps+=("$cap")
done
time_rows=""
for lab in ${labs//,/ }; do
  for mode in $modes; do
    row="| $lab | $mode |"
    for i in "${!measured[@]}"; do
      t="$(time_lab "${measured[$i]}" "$lab" "$mode")"
      row+=" $t |"
      echo "lab_ranges: ${measured_caps[$i]}: lab $lab ($mode): $t" >&2
    done
    time_rows+="$row"$'\n'
  done
done
kernel_rows=""
if grep -qw kernel <<<"${labs//,/ }"; then
  for i in "${!measured[@]}"; do
    kernel_rows+="| \`${measured_caps[$i]}\` | $(kernel_speed "${measured[$i]}") |"$'\n'
  done
fi

# --- the document -----------------------------------------------------------------------------
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -n1)"
load="$(cut -d' ' -f1-3 /proc/loadavg)"
command="scripts/lab_ranges.sh$([ "$quick" = 1 ] && echo " --quick" || true)"
mkdir -p "$(dirname "$out")"
tmp="$(mktemp "$out.XXXXXX")"
cat >"$tmp" <<MD
# The labs' ranges per CPU kind

Written by \`$command\` (do not edit by hand: run it again$([ "$quick" = 1 ] && echo "; --quick: a smoke run with short measurements, not for the handouts")).
Measured on $cpu ($(nproc) cores; its own level \`$own\`), $(date -u +%Y-%m-%d), at each
CPU kind's instruction-set level this machine allows, with oneDNN and bertlab's kernels capped by
\`ONEDNN_MAX_CPU_ISA\` below its own level (what a CPU of that kind runs). A kind this CPU lacks
says "not measured: no such CPU": run the script on such a machine. A capped level runs the lower
level's code on this machine's cores, caches and memory, so it is what that code does here, not
what a real CPU of that kind does. Timing on a shared or busy machine widens the ranges and lowers
them: the load average (1, 5, 15 minutes) was $load when the document was written.

## Calibration and training throughput
The GEMM peaks (the square GEMM's) and the triads (DRAM, and cache-resident: "-" when it came
out below DRAM, a busy machine) are what \`bertlab calibrate ${calibrate_args[*]}\` printed
(each the best of its passes; lab 1, step 1, and lab 2: compare yours); the sequences/s are the
lowest to the highest of $repeats run(s) of

    bertlab bench --config configs/bert-mini.json --mode train --batch 8 --seq 128 --precision fp32|bf16

| CPU kind | level | measured | native bf16 | GEMM peak fp32 (GFLOP/s) | GEMM peak bf16 (GFLOP/s) | triad, DRAM (GB/s) | triad, cache-resident (GB/s) | fp32 sequences/s | bf16 sequences/s | bf16 / fp32 throughput (lab 4) | step time fp32 -> bf16 (lab 1, step 5) |
|---|---|---|---|---|---|---|---|---|---|---|---|
${cpu_rows}
## Shares of a measured training step (lab 1)
The share of the measured step (\`bertlab profile\`, fp32, seq 128, with that level's
machine.json) that the four GEMM categories take (its line "GEMMs N% of the step") and that the
optimizer update takes, lowest to highest of $repeats profile(s) of each:

    bertlab profile --config configs/bert-mini.json --mode train --batch 8 --seq 128 --accum 1|4 --runs $([ "$quick" = 1 ] && echo 1 || echo 3)
    bertlab profile --config configs/bert-base.json --mode train --batch 4 --seq 128 --runs $([ "$quick" = 1 ] && echo 1 || echo 3)

| CPU kind | level | GEMM share, BERT-mini (step 2) | GEMM share, BERT-base (step 2) | optimizer share, BERT-mini, accum 1 (step 5) | optimizer share, accum 4 (step 5) |
|---|---|---|---|---|---|
${share_rows}
## Lab 2: a plain layernorm against bertlab's
The teachers' solution (\`labs/kernel/solution/student.cpp\`: a clean two-pass loop with \`omp
parallel for\`, sums in double) against bertlab's kernels, from its grader's \`[INFO]\` line
(median of 15 runs on 1024 x 768) in the runs timed below, lowest to highest:

| level | forward time / oneDNN's | backward time / bertlab's | forward bandwidth (GB/s) |
|---|---|---|---|
${kernel_rows:-| (lab 2 not run) | | | |
}
## Each lab's time
Each lab's grader on the teachers' solution (\`build/labs/lab_NAME_solution\`), 2 threads, end to
end: \`quick\` with \`--quick\` (what the tests run), \`full\` as a student runs it (\`bertlab lab
check NAME\`: the training labs on out/brown-128 for 100 steps). A failed run says so.

${time_header}
${time_rule}
${time_rows}
MD
chmod 644 "$tmp"
mv "$tmp" "$out"
echo "lab_ranges: wrote $out"
