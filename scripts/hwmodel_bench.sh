#!/usr/bin/env bash
# The hwmodel performance target: the whole BERT-large training graph (seq 512, batch 1)
# under 100 distinct system configurations; prints each of 5 runs and their median.
set -euo pipefail
BIN=${BIN:-./build/bertlab}
tmp=$(mktemp -d)
"$BIN" graph --config configs/bert-large.json --batch 1 --seq 512 --mode train -o "$tmp/train.json"
for i in 1 2 3 4 5; do
  "$BIN" estimate --graph "$tmp/train.json" --system configs/systems/paper-ticsat.json --bench 100
done | tee "$tmp/runs.txt"
grep -o 'in [0-9.]* s' "$tmp/runs.txt" | awk '{print $2}' | sort -n | sed -n 3p | xargs -I{} echo "median of 5: {} s"
rm -rf "$tmp"
