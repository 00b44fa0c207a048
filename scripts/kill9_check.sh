#!/usr/bin/env bash
# Kill -9 harness (issue 14): trains BERT-tiny with a checkpoint every 2 steps, kills the run
# with SIGKILL at KILLS random moments (some while a checkpoint is being written), resumes each
# time from the newest complete checkpoint, and checks that the final weights and the loss log
# are bit-identical to an uninterrupted run.
#
#   scripts/kill9_check.sh [KILLS=20] [BUILD_DIR=build]
# Prints how many of the KILLS attempts were killed while running (an attempt that finished
# before its kill tested nothing, and fails the check), the final run's exit, and whether the
# final weights and the loss log are identical; exits 0 only when everything held.
set -uo pipefail
kills=${1:-20}
build=${2:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$build" && pwd)/bertlab
[ -x "$bin" ] || { echo "kill9: $bin not built" >&2; exit 2; }
work=$(mktemp -d /tmp/bertlab_kill9.XXXXXX)
trap 'rm -rf "$work"' EXIT
RANDOM=${KILL9_SEED:-14}

steps=60
"$bin" vocab --corpus "$root/tests/data/corpus_small.txt" --vocab-size 200 --out "$work/vocab" >/dev/null 2>&1 || exit 2
"$bin" prepare --corpus "$root/tests/data/corpus_small.txt" --vocab "$work/vocab" --seq-len 32 --dupe-factor 4 \
  --out "$work/data" >/dev/null 2>&1 || exit 2
common=(train --config "$root/configs/bert-tiny.json" --data "$work/data" --batch-size 4 --max-steps "$steps"
        --save-steps 2 --save-total-limit 2 --eval-steps 10 --eval-batches 2 --log-steps 1 --seed 7 --threads 1)

start=$(date +%s.%N)
"$bin" "${common[@]}" --out "$work/ref" >"$work/ref.log" 2>&1 || { cat "$work/ref.log"; exit 2; }
run_s=$(echo "$(date +%s.%N) - $start" | bc)

# One attempt of the interrupted run: resume from the newest complete checkpoint, or start afresh.
launch() {
  if ls "$work/run"/checkpoint-*/manifest.json >/dev/null 2>&1; then
    "$bin" "${common[@]}" --out "$work/run" --resume latest >>"$work/run.log" 2>&1 &
  else
    "$bin" "${common[@]}" --out "$work/run" --overwrite >>"$work/run.log" 2>&1 &
  fi
  pid=$!
}

killed=0 finished=0 during_write=0
for ((k = 1; k <= kills; k++)); do
  launch
  if ((k % 3 == 0)); then
    # Wait for a checkpoint being written (its hidden .tmp directory), then kill inside it
    # (polled without forking: a checkpoint of BERT-tiny is written in milliseconds).
    /usr/bin/python3 - "$pid" "$work/run" "$RANDOM" <<'PY' && during_write=$((during_write + 1))
import os, random, sys, time
pid, out = int(sys.argv[1]), sys.argv[2]
random.seed(int(sys.argv[3]))
end = time.time() + 60
while time.time() < end:
    try:
        if any(e.name.startswith(".checkpoint-") and e.name.endswith(".tmp") for e in os.scandir(out)):
            time.sleep(random.random() * 0.003)
            os.kill(pid, 9)
            sys.exit(0)
        os.kill(pid, 0)
    except (FileNotFoundError, ProcessLookupError):
        if not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z":
            sys.exit(1)
sys.exit(1)
PY
  else
    # Early moments (a tenth of a whole run at most): the 20 attempts must not finish the run.
    sleep "$(echo "scale=3; $run_s * $((RANDOM % 1000)) / 10000" | bc)"
  fi
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  status=$?
  # 137: killed while running; 0: it finished before the kill, so the kill tested nothing.
  if [ "$status" -eq 137 ]; then killed=$((killed + 1))
  elif [ "$status" -eq 0 ]; then finished=$((finished + 1)); echo "kill9: attempt $k finished before its kill" >&2
  else echo "kill9: attempt $k exited $status:" >&2; tail -5 "$work/run.log" >&2
  fi
  # Nothing half-written may pass as a checkpoint: every checkpoint-N with a manifest verifies
  # (a resume below would refuse it otherwise), and no .tmp is mistaken for one.
done
# Finish the run.
if ls "$work/run"/checkpoint-*/manifest.json >/dev/null 2>&1; then
  "$bin" "${common[@]}" --out "$work/run" --resume latest >>"$work/run.log" 2>&1
else
  "$bin" "${common[@]}" --out "$work/run" --overwrite >>"$work/run.log" 2>&1
fi
final=$?

same_weights=no same_log=no
cmp -s "$work/ref/model.safetensors" "$work/run/model.safetensors" && same_weights=yes
# The loss log without the wall-clock field (seq/s differs between any two runs).
strip() { /usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line); j.pop("seq_per_s", None); print(json.dumps(j, sort_keys=True))' "$1"; }
[ "$(strip "$work/ref/metrics.jsonl")" == "$(strip "$work/run/metrics.jsonl")" ] && same_log=yes
lines=$(wc -l <"$work/run/metrics.jsonl")
echo "kill9: $killed/$kills attempts killed while running and resumed ($during_write during a checkpoint write," \
     "$finished finished before the kill), final run exit $final;" \
     "final weights identical: $same_weights; loss log identical: $same_log ($lines lines)"
[ "$killed" -eq "$kills" ] && [ "$final" -eq 0 ] && [ "$same_weights" = yes ] && [ "$same_log" = yes ]
