#!/usr/bin/env bash
# The hwmodel performance target: the whole BERT-large training graph (seq 512, batch 1)
# under CONFIGS distinct system configurations (default 100); prints each of RUNS runs
# (default 5) and their median.
#   scripts/hwmodel_bench.sh            the paper system (hashed 8-way LLC): goal < 1 s
#   scripts/hwmodel_bench.sh modulo     the same system with a modulo-indexed 8-way LLC
#                                       (no hashed_index): goal < 10 s
# CONFIGS and RUNS may be lowered for a quick measurement of the slow modulo path.
set -euo pipefail
BIN=${BIN:-./build/bertlab}
CONFIGS=${CONFIGS:-100}
RUNS=${RUNS:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
system=configs/systems/paper-ticsat.json
if [[ "${1:-hashed}" == modulo ]]; then
  /usr/bin/python3 - "$system" "$tmp/modulo.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["llc"]["hashed_index"] = False
j["name"] += " [modulo-indexed LLC]"
json.dump(j, open(sys.argv[2], "w"))
PY
  system=$tmp/modulo.json
fi
"$BIN" graph --config configs/bert-large.json --batch 1 --seq 512 --mode train -o "$tmp/train.json"
for i in $(seq 1 "$RUNS"); do
  "$BIN" estimate --graph "$tmp/train.json" --system "$system" --bench "$CONFIGS"
done | tee "$tmp/runs.txt"
grep -o 'in [0-9.]* s' "$tmp/runs.txt" | awk '{print $2}' | sort -n |
  awk '{v[NR]=$1} END {print "median of " NR ": " v[int((NR+1)/2)] " s"}'
