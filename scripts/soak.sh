#!/usr/bin/env bash
# Soak test (issues 14 and 44; not in CI): STEPS steps of BERT-tiny training (MODE=train) or of
# fine-tuning the tiny test model (MODE=finetune) with evaluation and checkpoints every 250 steps
# (SOAK_EVERY=N: every N). Samples the process's resident memory and open file
# descriptors (/proc/PID/fd) every second; after warm-up (the first tenth of the samples) the
# peak RSS of every tenth must stay within 2% of the peak right after warm-up, and the fewest
# descriptors open in each tenth must not grow. SOAK_SAMPLES=FILE keeps the samples.
#   scripts/soak.sh [STEPS=10000] [BUILD_DIR=build] [MODE=train|finetune]
set -uo pipefail
steps=${1:-10000}
build=${2:-build}
mode=${3:-train}
every=${SOAK_EVERY:-250}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$build" && pwd)/bertlab
work=$(mktemp -d /tmp/bertlab_soak.XXXXXX)
trap 'rm -rf "$work"' EXIT
if [ "$mode" = finetune ]; then
  mkdir -p "$work/model"
  cp "$root/tests/reference/tiny_bert/config.json" "$root/tests/reference/tiny_bert/model.safetensors" \
     "$root/tests/data/vocab_small/vocab.txt" "$work/model/"
  /usr/bin/python3 - "$work/train.csv" <<'PY' || exit 2
import random, sys
words = "the quick brown fox jumps over lazy hello world cafe".split()
rng = random.Random(1)
with open(sys.argv[1], "w") as f:
    f.write("text,label\n")
    for i in range(200):
        s = [rng.choice(words) for _ in range(3 + rng.randrange(5))]
        if i % 2 == 0:
            s[rng.randrange(len(s))] = "dog"
        f.write(f"\"{' '.join(s)}\",{'dog' if i % 2 == 0 else 'no-dog'}\n")
PY
  "$bin" finetune --task seq-cls --model "$work/model" --train "$work/train.csv" --eval "$work/train.csv" --batch-size 8 \
    --max-steps "$steps" --save-steps "$every" --save-total-limit 2 --eval-steps "$every" --log-steps 1000 --threads 1 \
    --out "$work/out" >"$work/train.log" 2>&1 &
else
  "$bin" vocab --corpus "$root/tests/data/corpus_small.txt" --vocab-size 200 --out "$work/vocab" >/dev/null 2>&1 || exit 2
  "$bin" prepare --corpus "$root/tests/data/corpus_small.txt" --vocab "$work/vocab" --seq-len 32 --dupe-factor 4 \
    --out "$work/data" >/dev/null 2>&1 || exit 2
  "$bin" train --config "$root/configs/bert-tiny.json" --data "$work/data" --batch-size 8 --max-steps "$steps" \
    --save-steps "$every" --save-total-limit 2 --eval-steps "$every" --eval-batches 4 --log-steps 1000 --threads 1 \
    --out "$work/out" >"$work/train.log" 2>&1 &
fi
pid=$!
: >"$work/samples"
start=$(date +%s)
# One sample a second: seconds since start, VmRSS (kB), open descriptors (entries of
# /proc/PID/fd). A sample is kept only when both reads succeeded while the process was still
# running: a listing taken as it exits is empty, and counting it as "0 open" hid any leak.
while kill -0 $pid 2>/dev/null; do
  rss=$(awk '/^VmRSS/ {print $2}' /proc/$pid/status 2>/dev/null)
  fds=$(ls -U /proc/$pid/fd 2>/dev/null) && nfd=$(printf '%s\n' "$fds" | grep -c .) || nfd=0
  if [ -n "$rss" ] && [ "$nfd" -gt 0 ] && kill -0 $pid 2>/dev/null; then
    echo "$(( $(date +%s) - start )) $rss $nfd" >>"$work/samples"
  fi
  sleep 1
done
wait $pid
status=$?
[ "$status" -eq 0 ] || tail -5 "$work/train.log" >&2
cp "$work/samples" "${SOAK_SAMPLES:-/dev/null}" 2>/dev/null || true
/usr/bin/python3 - "$work/samples" "$status" "$steps" "$mode" <<'PY'
import sys
rows = [tuple(map(int, l.split())) for l in open(sys.argv[1]) if l.strip()]
status, steps = int(sys.argv[2]), sys.argv[3]
if len(rows) < 20:
    print(f"soak: only {len(rows)} samples (exit {status}); run more steps"); sys.exit(1)
tenth = len(rows) // 10
tenths = [rows[i * tenth:(i + 1) * tenth] if i < 9 else rows[9 * tenth:] for i in range(10)]
# RSS: the first tenth is warm-up; the peak of every later tenth must stay within 2% of the
# peak of the second tenth (right after warm-up).
peaks = [max(r[1] for r in t) for t in tenths]
warm_rss, late_rss = peaks[1], max(peaks[1:])
growth = 100.0 * (late_rss - warm_rss) / warm_rss
# Descriptors over time: a file being written when a sample is taken adds one for a moment, a
# leak raises the floor. After warm-up, the fewest open in each tenth must not exceed the
# fewest open right after warm-up.
floors = [min(r[2] for r in t) for t in tenths]
peak_fd = max(r[2] for r in rows)
fd_ok = max(floors[2:]) <= floors[1]
ok = status == 0 and growth <= 2.0 and fd_ok
print(f"soak ({sys.argv[4]}): {steps} steps, exit {status}, {len(rows)} samples over {rows[-1][0]} s")
print(f"soak: peak RSS per tenth (kB): {' '.join(map(str, peaks))}")
print(f"soak: peak RSS {warm_rss} kB after warm-up, at most {late_rss} kB later ({growth:+.2f}%)")
print(f"soak: open fds per tenth (fewest): {' '.join(map(str, floors))}; at most {peak_fd} at any sample")
print(f"soak: {'flat' if ok else 'NOT flat'}")
sys.exit(0 if ok else 1)
PY
