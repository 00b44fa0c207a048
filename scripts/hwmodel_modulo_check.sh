#!/usr/bin/env bash
# Counts-unchanged check for speed work on the set-resolved (modulo-indexed LLC) path of the
# analytic model: writes the outputs a change must leave byte-identical into OUT_DIR.
#   BIN=/tmp/bertlab.base scripts/hwmodel_modulo_check.sh /tmp/before
#   BIN=./build/bertlab   scripts/hwmodel_modulo_check.sh /tmp/after
#   for f in /tmp/before/*; do cmp "$f" "/tmp/after/$(basename "$f")"; done
# The paper system under the array-only model (configs/systems/paper-ticsat-array.json) with hashed_index false (8-way 1 MB
# modulo-indexed LLC):
# - `estimate --json` of bert-base encoder.0 (inference, seq 128 and 512) and of the bert-base
#   training graph (seq 128), S = 4, 8, 16, 32, 1/2/4 cores, both arrangements;
# - the per-node CSV of the BERT-large training graph (seq 512) at S = 4, 2 cores and S = 8,
#   4 cores, RWMA (the slowest set-resolved configurations), at S = 4, 1 core and S = 8,
#   4 cores, BWMA, and on a 2-way LLC of the same size (1 MB, modulo-indexed) at S = 8,
#   4 cores, RWMA. The BWMA and 2-way runs cost about 8 s CPU more (measured under load:
#   BWMA ~0.4-0.5 s each, 2-way RWMA ~7 s).
# PARTS (default "base large") picks a subset.
set -euo pipefail
BIN=${BIN:-./build/bertlab}
PARTS=${PARTS:-base large}
out=${1:?usage: $0 OUT_DIR}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - configs/systems/paper-ticsat-array.json "$tmp/modulo.json" "$tmp/modulo2way.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["llc"]["hashed_index"] = False
j["name"] += " [modulo-indexed LLC]"
json.dump(j, open(sys.argv[2], "w"))
j["llc"]["ways"] = 2  # the same size, 4x the sets
j["name"] = j["name"].replace("modulo-indexed LLC", "2-way modulo-indexed LLC")
json.dump(j, open(sys.argv[3], "w"))
PY
sys=$tmp/modulo.json
if [[ " $PARTS " == *" base "* ]]; then
  for seq in 128 512; do
    "$BIN" graph --config configs/bert-base.json --batch 1 --seq $seq --heads none -o "$tmp/enc$seq.json"
    "$BIN" estimate --graph "$tmp/enc$seq.json" --nodes encoder.0. --system "$sys" --kernel 4,8,16,32 \
      --cores 1,2,4 --arrangement both --json "$out/base_encoder0_seq$seq.json" >/dev/null
  done
  "$BIN" graph --config configs/bert-base.json --batch 1 --seq 128 --mode train -o "$tmp/train128.json"
  "$BIN" estimate --graph "$tmp/train128.json" --system "$sys" --kernel 4,8,16,32 --cores 1,2,4 \
    --arrangement both --json "$out/base_train_seq128.json" >/dev/null
fi
if [[ " $PARTS " == *" large "* ]]; then
  "$BIN" graph --config configs/bert-large.json --batch 1 --seq 512 --mode train -o "$tmp/large.json"
  # LLC:S:cores:arrangement (the 8-way files keep their earlier names)
  for run in 8way:4:2:rwma 8way:8:4:rwma 8way:4:1:bwma 8way:8:4:bwma 2way:8:4:rwma; do
    IFS=: read -r llc S cores arr <<<"$run"
    if [[ $llc == 2way ]]; then
      llc_sys=$tmp/modulo2way.json file=$out/large_train_2way_S${S}_cores${cores}_$arr.csv
    else
      llc_sys=$sys file=$out/large_train_S${S}_cores${cores}_$arr.csv
    fi
    TIMEFORMAT="$llc LLC, S=$S, $cores cores, ${arr^^}: %U s user + %S s sys CPU, %R s wall"
    time "$BIN" estimate --graph "$tmp/large.json" --system "$llc_sys" --kernel "$S" --cores "$cores" \
      --arrangement "$arr" --csv "$file" >/dev/null
  done
fi
ls -l "$out"
