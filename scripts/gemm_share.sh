#!/usr/bin/env bash
# How close a BERT step can come to the GEMM roofline on this machine, counted by oneDNN itself
# rather than by bertlab's profiler: runs `bertlab bench` (one warm-up step, one timed step, the
# GEMM peak measured in the same run) with ONEDNN_VERBOSE=1, keeps the matmul executions of the
# timed step (the second half; the peak's 2048^3 products excluded) and adds up oneDNN's own
# execution times and FLOPs. A step cannot be shorter than its matmuls, so
#   model GFLOP / peak / (sum of matmul times)
# is an upper bound on the step's share of the roofline, whatever is fused or removed around
# the GEMMs. The fused attention step runs single-threaded products on every thread at once:
# their times count divided by the thread count. Prints one line per mode and precision; BERTLAB_REPS runs each (default 3), median.
# Usage: scripts/gemm_share.sh [build dir]   (MODES="infer train", PRECISIONS="fp32 bf16")
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build}/bertlab
reps=${BERTLAB_REPS:-3}
batch=${BERTLAB_BATCH:-8}
seq=${BERTLAB_SEQ:-128}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for mode in ${MODES:-infer train}; do
  for precision in ${PRECISIONS:-fp32 bf16}; do
    for rep in $(seq 1 "$reps"); do
      ONEDNN_VERBOSE=1 "$bin" bench --config configs/bert-base.json --batch "$batch" --seq "$seq" \
        --mode "$mode" --precision "$precision" --runs 1 --warmup 1 > "$work/$mode-$precision-$rep.log"
    done
    /usr/bin/python3 - "$mode" "$precision" "$work"/"$mode-$precision"-*.log <<'EOF'
import re, statistics, sys
mode, precision, logs = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = []
for path in logs:
    text = open(path).read()
    head = re.search(r"batch=(\d+) .*threads=(\d+)", text)
    batch, threads = int(head.group(1)), int(head.group(2))
    gemms = []  # (ms, flop) of every matmul execution but the peak's
    for line in text.splitlines():
        f = line.split(",")
        if len(f) < 6 or f[0] != "onednn_verbose" or f[1] != "exec" or f[3] != "matmul":
            continue
        src, wei, dst = (list(map(int, d.split("x"))) for d in f[-2].split(":"))
        if src == [2048, 2048] and wei == [2048, 2048]:
            continue  # bench's peak measurement
        out = 1
        for d in dst:
            out *= d
        ms = float(f[-1])
        if len(dst) > 2 and dst[0] < batch:
            ms /= threads  # a block of heads of the fused attention step: one per thread at once
        gemms.append((ms, 2.0 * out * src[-1]))
    step = gemms[len(gemms) // 2:]  # warm-up step, then the timed step: the same products
    ms = sum(t for t, _ in step)
    gflop = sum(fl for _, fl in step) / 1e9
    model = float(re.search(r"graph: .*?, ([0-9.]+) GFLOP per step", text).group(1))
    peak = float(re.search(r"measured \S+ GEMM peak ([0-9.]+) GFLOP/s", text).group(1))
    step_ms = float(re.search(r"step ([0-9.]+) ms", text).group(1))
    rows.append((ms, gflop, model, peak, step_ms))
rows.sort()
ms, gflop, model, peak, step_ms = rows[len(rows) // 2]
print(f"{mode} {precision}: matmuls of the timed step {ms:.1f} ms for {gflop:.1f} GFLOP "
      f"({gflop / ms * 1e3:.1f} GFLOP/s = {gflop / ms * 1e3 / peak:.0%} of the measured peak "
      f"{peak:.1f}); the whole step {step_ms:.1f} ms. Bound on the step's share of the roofline "
      f"({model:.1f} model GFLOP): {model / peak / ms * 1e3:.0%}; the step reached "
      f"{model / peak / step_ms * 1e3:.0%} (median of {len(rows)} runs by matmul time)")
EOF
  done
done
