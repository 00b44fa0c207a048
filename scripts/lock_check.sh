#!/usr/bin/env bash
# One writer per output directory (issue 44): starts two runs on one fresh --out at the same
# instant, TRIALS times, alternating `bertlab finetune` (the tiny test model) and `bertlab train`
# (BERT-tiny). Each time exactly one run must proceed and finish, and the other must fail at once
# with exit 1: refused by the lock, naming the other run's process id, or (when it came after the
# first had already written) refused because the directory exists. Then a lock file left by a
# run killed with SIGKILL must not block its resume.
#
#   scripts/lock_check.sh [TRIALS=100] [BUILD_DIR=build]
set -uo pipefail
trials=${1:-100}
build=${2:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$build" && pwd)/bertlab
[ -x "$bin" ] || { echo "lock_check: $bin not built" >&2; exit 2; }
work=$(mktemp -d /tmp/bertlab_lock.XXXXXX)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/model"
cp "$root/tests/reference/tiny_bert/config.json" "$root/tests/reference/tiny_bert/model.safetensors" \
   "$root/tests/data/vocab_small/vocab.txt" "$work/model/"
printf 'text,label\nthe dog,dog\nthe fox,fox\na lazy dog,dog\nquick fox,fox\n' >"$work/train.csv"
"$bin" vocab --corpus "$root/tests/data/corpus_small.txt" --vocab-size 200 --out "$work/vocab" >/dev/null 2>&1 || exit 2
"$bin" prepare --corpus "$root/tests/data/corpus_small.txt" --vocab "$work/vocab" --seq-len 32 --out "$work/data" \
  >/dev/null 2>&1 || exit 2

# Two processes released at the same instant (each sleeps until a shared moment after fork,
# then execs bertlab); prints "exit1 exit2 pid1 pid2" and leaves their output in OUT.log1/2.
pair() {
  /usr/bin/python3 - "$@" <<'PY'
import subprocess, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
at = time.time() + 0.3
wait = lambda: time.sleep(max(0.0, at - time.time()))
procs = [subprocess.Popen(cmd, stdout=open(f"{out}.log{i}", "w"), stderr=subprocess.STDOUT, preexec_fn=wait)
         for i in (1, 2)]
codes = [p.wait() for p in procs]
print(*codes, *(p.pid for p in procs))
PY
}

by_lock=0 by_exists=0 bad=0
for ((t = 1; t <= trials; t++)); do
  out="$work/out$t"
  if ((t % 2)); then
    cmd=("$bin" finetune --task seq-cls --model "$work/model" --train "$work/train.csv" --eval "$work/train.csv"
         --max-steps 2 --batch-size 2 --threads 1 --out "$out")
  else
    cmd=("$bin" train --config "$root/configs/bert-tiny.json" --data "$work/data" --batch-size 2 --max-steps 2
         --threads 1 --out "$out")
  fi
  read -r c1 c2 p1 p2 < <(pair "$out" "${cmd[@]}")
  if [ "$c1" -eq 0 ] && [ "$c2" -eq 1 ]; then loser=2 winner=$p1
  elif [ "$c1" -eq 1 ] && [ "$c2" -eq 0 ]; then loser=1 winner=$p2
  else bad=$((bad + 1)); echo "lock_check: trial $t: exits $c1 and $c2" >&2; continue
  fi
  if grep -q "in use by another bertlab run (process $winner;" "$out.log$loser"; then by_lock=$((by_lock + 1))
  elif grep -q "output directory .* exists" "$out.log$loser"; then by_exists=$((by_exists + 1))
  else bad=$((bad + 1)); echo "lock_check: trial $t: the refused run said: $(head -c 300 "$out.log$loser")" >&2
  fi
done

# A run killed with SIGKILL leaves its lock file; the resume must not be blocked by it.
stale=no
"$bin" train --config "$root/configs/bert-tiny.json" --data "$work/data" --batch-size 2 --max-steps 400 --save-steps 2 \
  --threads 1 --out "$work/killed" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 200); do ls "$work"/killed/checkpoint-*/manifest.json >/dev/null 2>&1 && break; sleep 0.05; done
kill -9 $pid; wait $pid 2>/dev/null
if [ "$(cat "$work/killed/.bertlab.lock")" = "$pid" ] &&
   "$bin" train --data "$work/data" --batch-size 2 --max-steps 3 --threads 1 --out "$work/killed" --resume latest \
     >"$work/resume.log" 2>&1; then stale=yes; fi
echo "lock_check: $trials trials of two runs started together on one --out: exactly one proceeded in" \
     "$((by_lock + by_exists)) ($by_lock refused by the lock naming the other's process id, $by_exists refused because" \
     "the directory existed), $bad otherwise; a killed run's lock file left behind does not block the resume: $stale"
[ "$bad" -eq 0 ] && [ "$stale" = yes ]
