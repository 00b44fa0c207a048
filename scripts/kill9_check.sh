#!/usr/bin/env bash
# Kill -9 harness (issues 14 and 44): trains BERT-tiny (MODE=train) or fine-tunes the tiny test
# model for sequence classification (MODE=finetune) with a checkpoint every few steps, kills the
# run with SIGKILL at KILLS random moments, resumes each time from the newest complete
# checkpoint, and checks that the final weights and the loss log are bit-identical to an
# uninterrupted run (fine-tuning: eval_results.json too). A third of the kills land while a
# checkpoint is being written; in fine-tuning another third while an evaluation runs.
#
#   scripts/kill9_check.sh [KILLS=20] [BUILD_DIR=build] [MODE=train|finetune]
# KILL9_EXTRA: flags added to every run, e.g. "--accum-steps 3 --on-nonfinite skip
# --debug-nonfinite-batch 4:1,9:2:grad" (micro-batches left out of steps' updates).
# Prints how many of the KILLS attempts were killed while running (an attempt that finished
# before its kill tested nothing, and fails the check), where they were killed, how many files
# were found half-written after a kill, the final run's exit, and whether the final outputs are
# identical; exits 0 only when everything held.
set -uo pipefail
kills=${1:-20}
build=${2:-build}
mode=${3:-train}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$build" && pwd)/bertlab
[ -x "$bin" ] || { echo "kill9: $bin not built" >&2; exit 2; }
work=$(mktemp -d /tmp/bertlab_kill9.XXXXXX)
trap 'rm -rf "$work"' EXIT
RANDOM=${KILL9_SEED:-14}

case "$mode" in
  train)
    "$bin" vocab --corpus "$root/tests/data/corpus_small.txt" --vocab-size 200 --out "$work/vocab" >/dev/null 2>&1 || exit 2
    "$bin" prepare --corpus "$root/tests/data/corpus_small.txt" --vocab "$work/vocab" --seq-len 32 --dupe-factor 4 \
      --out "$work/data" >/dev/null 2>&1 || exit 2
    eval_steps=10
    common=(train --config "$root/configs/bert-tiny.json" --data "$work/data" --batch-size 4 --max-steps 60
            --save-steps 2 --save-total-limit 2 --eval-steps $eval_steps --eval-batches 2 --log-steps 1 --seed 7 --threads 1)
    compared=(model.safetensors) ;;
  finetune)
    # The tiny model of the tests (dropout on), a learnable task ("dog" or not), and an evaluation
    # set large enough that an evaluation lasts long enough to be killed in.
    mkdir -p "$work/model"
    cp "$root/tests/reference/tiny_bert/config.json" "$root/tests/reference/tiny_bert/model.safetensors" "$work/model/"
    cp "$root/tests/data/vocab_small/vocab.txt" "$work/model/"
    /usr/bin/python3 - "$work" <<'PY' || exit 2
import random, sys
words = "the quick brown fox jumps over lazy hello world cafe".split()
for name, n, seed in (("train", 96, 1), ("dev", 600, 2)):
    rng = random.Random(seed)
    with open(f"{sys.argv[1]}/{name}.csv", "w") as f:
        f.write("text,label\n")
        for i in range(n):
            s = [rng.choice(words) for _ in range(3 + rng.randrange(5))]
            if i % 2 == 0:
                s[rng.randrange(len(s))] = "dog"
            f.write(f"\"{' '.join(s)}\",{'dog' if i % 2 == 0 else 'no-dog'}\n")
PY
    eval_steps=8
    common=(finetune --task seq-cls --model "$work/model" --train "$work/train.csv" --eval "$work/dev.csv"
            --max-steps 60 --batch-size 4 --learning-rate 2e-3 --warmup-steps 5 --eval-steps $eval_steps
            --save-steps 3 --save-total-limit 2 --log-steps 1 --seed 7 --threads 1)
    compared=(model.safetensors eval_results.json) ;;
  *) echo "kill9: MODE is train or finetune, not $mode" >&2; exit 2 ;;
esac
read -r -a extra <<<"${KILL9_EXTRA:-}"
common+=("${extra[@]}")

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

# Waits for a moment of the run and kills it inside it (polled without forking: a checkpoint of
# BERT-tiny is written in milliseconds). checkpoint: a checkpoint's hidden .tmp directory exists;
# eval: the log's last line is a step that evaluates and its evaluation line is not written yet.
# Exits 0 when the kill landed in that moment.
kill_during() {
  /usr/bin/python3 - "$pid" "$work/run" "$RANDOM" "$1" "$eval_steps" <<'PY'
import json, os, random, sys, time
pid, out, seed, moment, every = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
random.seed(seed)
def last_line():
    try:
        with open(f"{out}/metrics.jsonl", "rb") as f:
            lines = f.read().split(b"\n")
        return json.loads(lines[-2]) if len(lines) > 1 else {}
    except (OSError, ValueError):
        return {}
def evaluating():
    j = last_line()
    return "loss" in j and j["step"] % every == 0
def in_moment():
    if moment == "checkpoint":
        return any(e.name.startswith(".checkpoint-") and e.name.endswith(".tmp") for e in os.scandir(out))
    return evaluating()
end = time.time() + 120
while time.time() < end:
    try:
        if os.path.isdir(out) and in_moment():
            time.sleep(random.random() * (0.003 if moment == "checkpoint" else 0.02))
            os.kill(pid, 9)
            sys.exit(0 if moment == "checkpoint" or evaluating() else 1)
        os.kill(pid, 0)
        if open(f"/proc/{pid}/stat").read().split()[2] == "Z":
            sys.exit(1)
    except (FileNotFoundError, ProcessLookupError):
        sys.exit(1)
sys.exit(1)
PY
}

# Files a kill may have left half-written: every checkpoint-N must verify against its manifest
# (there is no checkpoint-N without one), and the outputs at the top must be whole.
half_written() {
  /usr/bin/python3 - "$work/run" <<'PY'
import hashlib, json, os, struct, sys
out, bad = sys.argv[1], 0
for e in os.scandir(out):
    if e.name.startswith("checkpoint-"):
        try:
            files = json.load(open(f"{e.path}/manifest.json"))["files"]
            for name, want in files.items():
                data = open(f"{e.path}/{name}", "rb").read()
                bad += len(data) != want["bytes"] or hashlib.sha256(data).hexdigest() != want["sha256"]
        except (OSError, ValueError, KeyError):
            bad += 1
    elif e.name.endswith(".json") and e.is_file():
        try:
            json.load(open(e.path))
        except ValueError:
            bad += 1
    elif e.name.endswith(".safetensors") and e.is_file():
        data = open(e.path, "rb").read()
        n = struct.unpack("<Q", data[:8])[0]
        header = json.loads(data[8:8 + n])
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        bad += len(data) != 8 + n + end
print(bad)
PY
}

killed=0 finished=0 during_write=0 during_eval=0 half=0
for ((k = 1; k <= kills; k++)); do
  launch
  if ((k % 3 == 0)); then
    kill_during checkpoint && during_write=$((during_write + 1))
  elif ((k % 3 == 1)) && [ "$mode" = finetune ]; then
    kill_during eval && during_eval=$((during_eval + 1))
  else
    # Early moments (a tenth of a whole run at most): the attempts must not finish the run.
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
  half=$((half + $(half_written)))
done
# Finish the run.
if ls "$work/run"/checkpoint-*/manifest.json >/dev/null 2>&1; then
  "$bin" "${common[@]}" --out "$work/run" --resume latest >>"$work/run.log" 2>&1
else
  "$bin" "${common[@]}" --out "$work/run" --overwrite >>"$work/run.log" 2>&1
fi
final=$?

same_outputs=yes same_log=no
for f in "${compared[@]}"; do cmp -s "$work/ref/$f" "$work/run/$f" || same_outputs=no; done
# The loss log without the wall-clock field (seq/s differs between any two runs).
strip() { /usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line); j.pop("seq_per_s", None); print(json.dumps(j, sort_keys=True))' "$1"; }
[ "$(strip "$work/ref/metrics.jsonl")" == "$(strip "$work/run/metrics.jsonl")" ] && same_log=yes
lines=$(wc -l <"$work/run/metrics.jsonl")
echo "kill9 ($mode): $killed/$kills attempts killed while running and resumed ($during_write during a checkpoint write," \
     "$during_eval during an evaluation, $finished finished before the kill), $half half-written files, final run exit $final;" \
     "${compared[*]} identical: $same_outputs; loss log identical: $same_log ($lines lines)"
[ "$killed" -eq "$kills" ] && [ "$final" -eq 0 ] && [ "$half" -eq 0 ] && [ "$same_outputs" = yes ] && [ "$same_log" = yes ]
