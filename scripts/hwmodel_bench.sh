#!/usr/bin/env bash
# The performance target of the array-only model's closed forms (configs/systems/paper-ticsat-array.json;
# the paper system's in-order core model walks every access and is not this benchmark's subject):
# the whole BERT-large training graph (seq 512, batch 1)
# under CONFIGS distinct system configurations (default 100); prints each of RUNS runs
# (default 5) and their median.
#   scripts/hwmodel_bench.sh            the paper system (hashed 8-way LLC): goal < 1 s
#   scripts/hwmodel_bench.sh modulo     the same system with a modulo-indexed 8-way LLC
#                                       (no hashed_index): goal < 10 s
#   scripts/hwmodel_bench.sh exact      the paper system with "exact_sets": true (its hashed
#                                       LLC resolved per set; no goal, the cost of exactness)
# CONFIGS and RUNS may be lowered for a quick measurement of the slow modulo path.
set -euo pipefail
BIN=${BIN:-./build/bertlab}
CONFIGS=${CONFIGS:-100}
RUNS=${RUNS:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
system=configs/systems/paper-ticsat-array.json
case "${1:-hashed}" in
  hashed) ;;
  modulo | exact)
    /usr/bin/python3 - "$system" "$tmp/$1.json" "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
if sys.argv[3] == "modulo":
    j["llc"]["hashed_index"] = False
    j["name"] += " [modulo-indexed LLC]"
else:
    j["llc"]["exact_sets"] = True
    j["name"] += " [hashed LLC resolved per set]"
json.dump(j, open(sys.argv[2], "w"))
PY
    system=$tmp/$1.json ;;
  *) echo "hwmodel_bench.sh: expected hashed, modulo or exact, got '$1'" >&2; exit 2 ;;
esac
"$BIN" graph --config configs/bert-large.json --batch 1 --seq 512 --mode train -o "$tmp/train.json"
for i in $(seq 1 "$RUNS"); do
  "$BIN" estimate --graph "$tmp/train.json" --system "$system" --bench "$CONFIGS"
done | tee "$tmp/runs.txt"
grep -o 'in [0-9.]* s' "$tmp/runs.txt" | awk '{print $2}' | sort -n |
  awk '{v[NR]=$1} END {print "median of " NR ": " v[int((NR+1)/2)] " s"}'
