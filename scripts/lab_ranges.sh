#!/usr/bin/env bash
# The labs' expected ranges that depend on the CPU kind, measured by the tools on this machine at
# each instruction-set level it has (oneDNN and bertlab's kernels capped with
# ONEDNN_MAX_CPU_ISA, as tests/run_at_isa.sh does), written to docs/labs/ranges.md, which the
# handouts link. Levels this machine lacks (e.g. AMX on a Zen 4) stay in the table as "not
# measured here": run this script on such a machine to fill them in.
#
# Usage: scripts/lab_ranges.sh [BUILD_DIR] [REPEATS]   (defaults: build, 3)
# Per level: `bertlab bench --config configs/bert-mini.json --mode train --batch 8 --seq 128`
# in fp32 and, where the level multiplies bf16 natively, in bf16, REPEATS times each; a range
# is the lowest to the highest of the repeats. Takes a few minutes on 2 cores; run it on an idle
# machine (a loaded one widens the ranges).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}" repeats="${2:-3}"
bertlab="$build/bertlab"
[ -x "$bertlab" ] || { echo "error: $bertlab not found: build first (scripts/build.sh)" >&2; exit 1; }
out=docs/labs/ranges.md
mkdir -p docs/labs
caps="$(env -u ONEDNN_MAX_CPU_ISA -u DNNL_MAX_CPU_ISA "$bertlab" isa --caps)"
bench() {  # CAP PRECISION -> sequences/s
  ONEDNN_MAX_CPU_ISA="$1" OMP_NUM_THREADS=2 "$bertlab" bench --config configs/bert-mini.json --mode train \
    --batch 8 --seq 128 --precision "$2" --runs 3 --warmup 1 --no-peak 2>&1 |
    sed -n 's/.*throughput: \([0-9.]*\) sequences\/s.*/\1/p'
}
range() { tr ' ' '\n' | grep . | sort -g | sed -n '1p;$p' | paste -sd' ' | awk '{ printf "%.1f to %.1f", $1, $2 }'; }
ratio_range() {  # "a1 a2 .." "b1 b2 ..": lowest b/a to highest b/a over all pairs
  awk -v a="$1" -v b="$2" 'BEGIN { n = split(a, x, " "); m = split(b, y, " "); lo = 1e9; hi = 0;
    for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) { r = y[j] / x[i]; if (r < lo) lo = r; if (r > hi) hi = r }
    printf "%.2fx to %.2fx", lo, hi }'
}
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -n1)"
load="$(cut -d' ' -f1-3 /proc/loadavg)"
rows=""
for cap in AVX2 AVX512_CORE AVX512_CORE_BF16 AVX512_CORE_AMX; do
  case "$cap" in
    AVX2) kind="AVX2 only (most laptops before 2022, Zen 1-3)" ;;
    AVX512_CORE) kind="AVX-512 without bf16 (Skylake-X, Ice Lake)" ;;
    AVX512_CORE_BF16) kind="AVX-512 with bf16 (Cooper Lake, Zen 4)" ;;
    AVX512_CORE_AMX) kind="AMX (Sapphire Rapids and later)" ;;
  esac
  if ! grep -qx "$cap" <<<"$caps"; then
    rows+="| $kind | \`$cap\` | not measured here | | | | |"$'\n'
    echo "lab_ranges: $cap: this CPU does not have it" >&2
    continue
  fi
  bf16="$(ONEDNN_MAX_CPU_ISA="$cap" "$bertlab" isa | sed -n 's/^bf16: *//p')"
  fp32s="" bf16s=""
  for _ in $(seq "$repeats"); do fp32s+=" $(bench "$cap" fp32)"; done
  if [ "$bf16" = native ]; then
    for _ in $(seq "$repeats"); do bf16s+=" $(bench "$cap" bf16)"; done
    rows+="| $kind | \`$cap\` | native | $(range <<<"$fp32s") | $(range <<<"$bf16s") | $(ratio_range "$fp32s" "$bf16s") | $(ratio_range "$bf16s" "$fp32s") |"$'\n'
  else
    rows+="| $kind | \`$cap\` | none: the graders skip bf16 ([SKIP]) | $(range <<<"$fp32s") | skipped | skipped | skipped |"$'\n'
  fi
  echo "lab_ranges: $cap: fp32$fp32s; bf16${bf16s:- skipped}" >&2
done
tmp="$(mktemp "$out.XXXXXX")"
cat >"$tmp" <<MD
# The labs' ranges per CPU kind

Written by \`scripts/lab_ranges.sh\` (do not edit by hand: run it again). Measured on this
machine ($cpu, 2 cores, $(date -u +%Y-%m-%d)) at each instruction-set level it has, with
oneDNN and bertlab's kernels capped by \`ONEDNN_MAX_CPU_ISA\` (what a CPU of that kind runs);
a range is the lowest to the highest of $repeats runs of

    bertlab bench --config configs/bert-mini.json --mode train --batch 8 --seq 128 --precision fp32|bf16

A level this machine lacks says "not measured here": run the script on such a machine. A
capped level runs the lower level's code on this machine's cores, caches and memory, so it is
what that code does here, not what a real CPU of that kind does. Timing on a shared or busy
machine widens the ranges and lowers them: the load average (1, 5, 15 minutes) was $load when
this run started.

| CPU kind | level | native bf16 | fp32 sequences/s | bf16 sequences/s | bf16 / fp32 throughput (lab 4) | step time fp32 -> bf16 (lab 1, step 5) |
|---|---|---|---|---|---|---|
${rows}
MD
chmod 644 "$tmp"
mv "$tmp" "$out"
echo "lab_ranges: wrote $out"
