#!/usr/bin/env bash
# MPI fault test (issue 14) with `mpirun -np 2 bertlab train`:
#   1. one rank killed with SIGKILL mid-run: every rank must exit non-zero within 30 s;
#   2. ranks given different --max-steps, --seed or data: refuse to start, naming the difference.
# No case may hang (each is bounded by `timeout`). Prints one line per case and a summary.
#   scripts/mpi_fault_check.sh [BUILD_DIR=build]
set -uo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$build" && pwd)/bertlab
[ -x "$bin" ] || { echo "mpi_fault: $bin not built" >&2; exit 2; }
work=$(mktemp -d /tmp/bertlab_mpi_fault.XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
mpirun=(mpirun --allow-run-as-root --oversubscribe)

"$bin" vocab --corpus "$root/tests/data/corpus_small.txt" --vocab-size 200 --out "$work/vocab" >/dev/null 2>&1 || exit 2
for seq in 32 24; do
  "$bin" prepare --corpus "$root/tests/data/corpus_small.txt" --vocab "$work/vocab" --seq-len $seq --out "$work/data$seq" \
    >/dev/null 2>&1 || exit 2
done
args() { echo "$bin" train --config "$root/configs/bert-tiny.json" --data "$work/data${2:-32}" --batch-size 2 --threads 1 \
  --log-steps 1000 --out "$work/out$1" --overwrite "${@:3}"; }

failed=0 hangs=0
report() {  # name, exit status, seconds, output file, expected text
  local verdict=ok
  if [ "$2" -eq 124 ]; then verdict="HANG"; hangs=$((hangs + 1)); failed=$((failed + 1))
  elif [ "$2" -eq 0 ] || ! grep -q "$5" "$4"; then verdict="FAILED"; failed=$((failed + 1)); fi
  echo "mpi_fault: $1: exit $2 after ${3}s, $verdict ($(grep -m1 -o "error: .*" "$4" | cut -c1-150))"
}

# 1. A rank killed mid-run.
t0=$(date +%s)
timeout 60 "${mpirun[@]}" -np 2 $(args kill 32 --max-steps 100000) >"$work/kill.log" 2>&1 &
job=$!
victim=""
for ((i = 0; i < 300; i++)); do
  [ -n "$victim" ] && break
  sleep 0.1
  # The bertlab ranks are children of mpirun (or of its daemon); take the one with the highest pid.
  victim=$(pgrep -f "^$bin train.*$work/outkill" | sort -n | tail -1)
done
sleep 3
t_kill=$(date +%s)
[ -n "$victim" ] && kill -9 "$victim"
wait $job
status=$?
end=$(date +%s)
left=$(pgrep -f "^$bin train.*$work/outkill" | wc -l)
echo "mpi_fault: killed rank: mpirun exit $status $((end - t_kill)) s after the kill, $left ranks left running"
if [ "$status" -eq 0 ] || [ "$status" -eq 124 ] || [ $((end - t_kill)) -gt 30 ] || [ "$left" -ne 0 ]; then
  failed=$((failed + 1)); [ "$status" -eq 124 ] && hangs=$((hangs + 1))
fi

# 2. Ranks that disagree.
mismatch() {  # name, expected text, args of rank 0, args of rank 1
  local name=$1 want=$2
  local t0=$(date +%s)
  timeout 60 "${mpirun[@]}" -np 1 $3 : -np 1 $4 >"$work/$name.log" 2>&1
  local s=$?
  report "$name" $s $(($(date +%s) - t0)) "$work/$name.log" "$want"
}
mismatch max-steps "max_steps" "$(args a 32 --max-steps 5)" "$(args a 32 --max-steps 6)"
mismatch seed "seed" "$(args b 32 --max-steps 5 --seed 1)" "$(args b 32 --max-steps 5 --seed 2)"
mismatch data "seq_len\|data_fingerprint" "$(args c 32 --max-steps 5)" "$(args c 24 --max-steps 5)"
mismatch lr "lr" "$(args d 32 --max-steps 5 --lr 1e-3)" "$(args d 32 --max-steps 5 --lr 2e-3)"

echo "mpi_fault: $failed failed, $hangs hangs"
[ "$failed" -eq 0 ]
