#!/usr/bin/env bash
# Checks `bertlab estimate --cluster` against measured data-parallel runs (issue 15): 2 ranks of
# `bertlab train` (BERT-mini, 1 thread each) in a new network namespace whose loopback is shaped
# with tc tbf to RATE, with OpenMPI's TCP transport, flat and overlapped, and the same 2 ranks
# on the unshaped loopback (their compute with a nearly free allreduce).
# The node: two `bertlab profile --threads 1` of the same graph run at once (each "node" of this
# emulation shares the machine with the other rank, as the ranks do), passed as the cluster
# file's node_profile; the calibrated CPU model's estimate is printed beside it, unchecked. The
# link is RATE / 2 per direction: the ranks' opposite transfers share the one shaped loopback
# (two TCP flows over it measured 0.50-0.56 Gbit/s each at 1gbit). Compares:
#   step time, flat and overlapped:       estimate vs measured median step
#   communication time of the flat step:  estimate vs shaped flat step - unshaped flat step
# and passes when all three are within TOLERANCE (15%). Run it on an otherwise idle machine.
#   sudo scripts/cluster_check.sh [DATA=out/brown-128-packed]
# Environment: RATE (1gbit, also 10gbit), BATCH per rank (32), STEPS (10), ROUNDS (3), BUCKET_MB (4).
# No added delay: this kernel may lack netem, so latency is the loopback's (taken as 0).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
data=${1:-$root/out/brown-128-packed}
bin=$root/build/bertlab
[ -x "$bin" ] || { echo "cluster_check: $bin not built (scripts/build.sh)" >&2; exit 2; }
[ -f "$data/meta.json" ] || { echo "cluster_check: no prepared data in $data (run scripts/demo.sh, or pass DATA)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "cluster_check: needs root (network namespace and tc)" >&2; exit 2; }
[ -n "${BERTLAB_IN_NETNS:-}" ] || "$root/scripts/setup.sh" bench >/dev/null || exit 2  # tc (iproute2)
if [ -z "${BERTLAB_IN_NETNS:-}" ]; then
  BERTLAB_IN_NETNS=1 exec unshare -n "$0" "$@"
fi
rate=${RATE:-1gbit} batch=${BATCH:-32} steps=${STEPS:-10} rounds=${ROUNDS:-3} bucket=${BUCKET_MB:-4}
tol=${TOLERANCE:-0.15}
gbit=$(/usr/bin/python3 -c "import re,sys; v,u=re.fullmatch(r'([0-9.]+)([kmg]?)bit','$rate').groups(); print(float(v)*{'k':1e-6,'m':1e-3,'g':1}[u] if u else float(v)*1e-9)")
ip link set lo up
work=$(mktemp -d /tmp/bertlab_cluster.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "cluster_check: calibrating one thread (the CPU model of one rank, printed unchecked)"
"$bin" calibrate --threads 1 --seconds 0.5 --passes 2 --out "$work/machine.json" >/dev/null
train=(train --config "$root/configs/bert-mini.json" --data "$data" --overwrite --max-steps "$steps" --batch-size "$batch"
  --threads 1 --no-nsp --precision auto --log-steps 1000 --eval-batches 1 --save-steps 100000)
median_step() {  # metrics.jsonl, sequences per step
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, statistics, sys
per = int(sys.argv[2])
rows = [json.loads(l) for l in open(sys.argv[1]) if '"seq_per_s"' in l]
el = [r["step"] * per / r["seq_per_s"] for r in rows]  # seq_per_s is cumulative from the first step
print(f"{statistics.median([b - a for a, b in zip(el, el[1:])][1:]):.4f}")
PY
}
ranks() {
  mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl tcp,self --mca btl_tcp_if_include lo \
    --mca oob_tcp_if_include lo "$bin" "${train[@]}" --out "$work/two" "$@" >"$work/log" 2>&1 ||
    { cat "$work/log" >&2; exit 1; }
  median_step "$work/two/metrics.jsonl" "$((2 * batch))"
}
t0=() tf=() to=()
for r in $(seq "$rounds"); do
  tc qdisc del dev lo root 2>/dev/null || true
  t0+=("$(ranks --no-overlap)")
  tc qdisc add dev lo root tbf rate "$rate" burst 256kb latency 100ms
  tf+=("$(ranks --no-overlap)") to+=("$(ranks --bucket-mb "$bucket")")
  echo "cluster_check: round $r: 2 ranks unshaped ${t0[-1]} s/step; over $rate: flat ${tf[-1]}, overlapped ${to[-1]} s/step"
done
tc qdisc del dev lo root
# The node measured: the trained model's own config (its vocabulary comes from the data), two
# profiles at once.
cfg=$work/two/config.json
prof=(profile --config "$cfg" --mode train --no-nsp --batch "$batch" --seq 128 --precision auto --threads 1 --runs 5 --machine "$work/machine.json")
"$bin" "${prof[@]}" --json "$work/node.json" >"$work/p1.log" 2>&1 & p1=$!
"$bin" "${prof[@]}" --json "$work/other.json" >"$work/p2.log" 2>&1 & p2=$!
wait $p1 && wait $p2 || { cat "$work/p1.log" "$work/p2.log" >&2; echo "cluster_check: profile failed" >&2; exit 1; }
for mode in flat overlap model; do
  overlap=$([ $mode = flat ] && echo false || echo true)
  node='"node_profile": "node.json"'; [ $mode = model ] && node='"node": "machine.json"'
  cat >"$work/cluster-$mode.json" <<JSON
{"format": "bertlab-cluster", "name": "loopback $rate (tbf)", "nodes": [1, 2], $node,
 "network": {"bandwidth_gbps": $(/usr/bin/python3 -c "print($gbit / 2)"), "latency_us": 0, "allreduce": "ring"},
 "allreduce": {"bucket_mb": $bucket, "overlap": $overlap}}
JSON
  "$bin" estimate --cluster "$work/cluster-$mode.json" --config "$cfg" --train --no-nsp --batch "$batch" --seq 128 \
    --precision auto --json "$work/est-$mode.json" >/dev/null
done
/usr/bin/python3 - "${t0[*]}" "${tf[*]}" "${to[*]}" "$work" "$tol" <<'PY'
import json, statistics, sys
med = lambda s: statistics.median(map(float, s.split()))
t0, tf, to = med(sys.argv[1]), med(sys.argv[2]), med(sys.argv[3])
est = lambda m: {r["nodes"]: r for r in json.load(open(f"{sys.argv[4]}/est-{m}.json"))}
ef, eo, em = est("flat"), est("overlap"), est("model")
tol = float(sys.argv[5])
rows = [("2 ranks flat: step", ef[2]["step_s"], tf, True),
        ("2 ranks flat: communication", ef[2]["exposed_allreduce_s"], tf - t0, True),
        ("2 ranks overlapped: step", eo[2]["step_s"], to, True),
        ("2 ranks overlapped: exposed communication", eo[2]["exposed_allreduce_s"], to - t0, False),
        ("2 ranks unshaped: step (the node profile)", ef[1]["step_s"], t0, False),
        ("2 ranks overlapped: step, calibrated CPU model as the node", em[2]["step_s"], to, False)]
bad = 0
print("| quantity | estimate s | measured s | error |\n|---|---|---|---|")
for name, e, m, checked in rows:
    err = (e - m) / m
    bad += checked and abs(err) > tol
    print(f"| {name} | {e:.4f} | {m:.4f} | {100 * err:+.1f}%{'' if checked else ' (not checked)'} |")
print(f"measured speedup of overlap {tf / to:.2f}x, estimated {ef[2]['step_s'] / eo[2]['step_s']:.2f}x")
n = sum(r[3] for r in rows)
print(f"cluster_check: {'PASS' if not bad else 'FAIL'}: {n - bad} of {n} within {100 * tol:.0f}%")
sys.exit(1 if bad else 0)
PY
