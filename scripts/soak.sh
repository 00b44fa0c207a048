#!/usr/bin/env bash
# Soak test (issue 14; not in CI): STEPS steps of BERT-tiny training with evaluation and
# checkpoints every 250 steps. Samples the process's resident memory and open file
# descriptors every second; after warm-up (the first 10% of the samples) the peak RSS must
# stay within 2% of the warm-up peak and the descriptors open at rest must not grow.
#   scripts/soak.sh [STEPS=10000] [BUILD_DIR=build]
set -uo pipefail
steps=${1:-10000}
build=${2:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$build" && pwd)/bertlab
work=$(mktemp -d /tmp/bertlab_soak.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$bin" vocab --corpus "$root/tests/data/corpus_small.txt" --vocab-size 200 --out "$work/vocab" >/dev/null 2>&1 || exit 2
"$bin" prepare --corpus "$root/tests/data/corpus_small.txt" --vocab "$work/vocab" --seq-len 32 --dupe-factor 4 \
  --out "$work/data" >/dev/null 2>&1 || exit 2
"$bin" train --config "$root/configs/bert-tiny.json" --data "$work/data" --batch-size 8 --max-steps "$steps" \
  --save-steps 250 --save-total-limit 2 --eval-steps 250 --eval-batches 4 --log-steps 1000 --threads 1 \
  --out "$work/out" >"$work/train.log" 2>&1 &
pid=$!
: >"$work/samples"
while kill -0 $pid 2>/dev/null; do
  rss=$(awk '/^VmRSS/ {print $2}' /proc/$pid/status 2>/dev/null)
  fds=$(ls /proc/$pid/fd 2>/dev/null | wc -l)
  [ -n "$rss" ] && echo "$rss $fds" >>"$work/samples"
  sleep 1
done
wait $pid
status=$?
/usr/bin/python3 - "$work/samples" "$status" "$steps" <<'PY'
import sys
rows = [tuple(map(int, l.split())) for l in open(sys.argv[1]) if l.strip()]
status, steps = int(sys.argv[2]), sys.argv[3]
if len(rows) < 10:
    print(f"soak: only {len(rows)} samples (exit {status}); run more steps"); sys.exit(1)
warm = max(1, len(rows) // 10)
warm_rss = max(r[0] for r in rows[:warm]); late_rss = max(r[0] for r in rows[warm:])
# Descriptors: a file being written when a sample is taken adds one for a moment; a leak raises
# the floor. Compare the fewest open in the warm-up with the fewest in the last tenth.
warm_fd = min(r[1] for r in rows[:warm]); late_fd = min(r[1] for r in rows[-warm:])
peak_fd = max(r[1] for r in rows)
growth = 100.0 * (late_rss - warm_rss) / warm_rss
ok = status == 0 and growth <= 2.0 and late_fd <= warm_fd
print(f"soak: {steps} steps, exit {status}, {len(rows)} samples; peak RSS {warm_rss} kB after warm-up, "
      f"{late_rss} kB later ({growth:+.2f}%); open fds at rest {warm_fd} -> {late_fd} (at most {peak_fd}): "
      f"{'flat' if ok else 'NOT flat'}")
sys.exit(0 if ok else 1)
PY
