#!/usr/bin/env bash
# Overlapped, bucketed gradient allreduce against the flat one after backward (issue 15), over a
# shaped link: 2 ranks of `bertlab train` (BERT-mini) in a new network namespace whose loopback is
# limited by a token-bucket filter (tc tbf) to RATE, with OpenMPI's TCP transport on it. Rounds
# alternate flat / overlapped; each run's step time is the median over its steps after the second
# (from metrics.jsonl), and the script prints the median over rounds and the speedup, for each
# batch size per rank in BATCH.
#   sudo scripts/allreduce_overlap_check.sh [DATA=out/brown-128-packed]
# Environment: RATE (1gbit), BATCH: batch sizes per rank ("16 32"), STEPS (10), ROUNDS (3), BUCKET_MB (4), THREADS per
# rank (1), EXTRA (more train flags for both, e.g. "--allreduce-dtype bf16").
# Needs root (unshare -n, tc). netem (delay) is not used: this kernel may lack it; tbf only shapes
# the rate. Both directions share the one shaped loopback, so a 1 Gbit/s full-duplex link is
# modelled pessimistically (1 Gbit/s in total).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
data=${1:-$root/out/brown-128-packed}
bin=$root/build/bertlab
[ -x "$bin" ] || { echo "allreduce_overlap: $bin not built (scripts/build.sh)" >&2; exit 2; }
[ -f "$data/meta.json" ] || { echo "allreduce_overlap: no prepared data in $data (run scripts/demo.sh, or pass DATA)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "allreduce_overlap: needs root (network namespace and tc)" >&2; exit 2; }
[ -n "${BERTLAB_IN_NETNS:-}" ] || "$root/scripts/setup.sh" bench >/dev/null || exit 2  # tc (iproute2)
if [ -z "${BERTLAB_IN_NETNS:-}" ]; then
  BERTLAB_IN_NETNS=1 exec unshare -n "$0" "$@"
fi
rate=${RATE:-1gbit} batches=${BATCH:-16 32} steps=${STEPS:-10} rounds=${ROUNDS:-3} bucket=${BUCKET_MB:-4} threads=${THREADS:-1}
ip link set lo up
tc qdisc add dev lo root tbf rate "$rate" burst 256kb latency 100ms
work=$(mktemp -d /tmp/bertlab_overlap.XXXXXX)
trap 'rm -rf "$work"' EXIT
run() {  # mode flags... -> prints the median step time in seconds
  local out=$work/out
  mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl tcp,self --mca btl_tcp_if_include lo \
    --mca oob_tcp_if_include lo "$bin" train --config "$root/configs/bert-mini.json" --data "$data" --out "$out" \
    --overwrite --max-steps "$steps" --batch-size "$batch" --threads "$threads" --no-nsp --no-dropout --precision auto \
    --log-steps 1000 --eval-batches 1 --save-steps 100000 ${EXTRA:-} "$@" >"$work/log" 2>&1 ||
    { cat "$work/log" >&2; exit 1; }
  /usr/bin/python3 - "$out/metrics.jsonl" "$((batch * 2))" <<'PY'
import json, statistics, sys
per = int(sys.argv[2])
rows = [json.loads(l) for l in open(sys.argv[1]) if '"seq_per_s"' in l]
# seq_per_s is cumulative from the first step: elapsed(k) = k * per / sps(k).
el = [r["step"] * per / r["seq_per_s"] for r in rows]
steps = [b - a for a, b in zip(el, el[1:])][1:]
print(f"{statistics.median(steps):.4f}")
PY
}
for batch in $batches; do
  echo "allreduce_overlap: 2 ranks, BERT-mini, batch $batch per rank, $threads thread(s) each, link $rate (tc tbf), $steps steps x $rounds rounds"
  flat=() over=()
  for r in $(seq "$rounds"); do
    f=$(run --no-overlap); o=$(run --bucket-mb "$bucket")
    echo "allreduce_overlap: round $r: flat ${f} s/step, overlapped (${bucket} MiB buckets) ${o} s/step"
    flat+=("$f") over+=("$o")
  done
  /usr/bin/python3 - "${flat[*]}" "${over[*]}" "$batch" <<'PY'
import statistics, sys
f = statistics.median(map(float, sys.argv[1].split())); o = statistics.median(map(float, sys.argv[2].split()))
b = 2 * int(sys.argv[3])
print(f"allreduce_overlap: batch {sys.argv[3]} per rank: median flat {f:.4f} s/step ({b / f:.1f} seq/s), "
      f"overlapped {o:.4f} s/step ({b / o:.1f} seq/s): speedup {f / o:.2f}x")
PY
done
