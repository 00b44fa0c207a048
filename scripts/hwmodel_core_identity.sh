#!/usr/bin/env bash
# Counts-unchanged check for speed work on the in-order core model's exact walk
# (hwmodel/core_walk.*, hwmodel/tracesim.*, hwmodel/estimate_core.cpp): runs two binaries on the
# same inputs and compares their outputs byte for byte.
#   BASE=/tmp/bertlab.base NEW=./build/bertlab scripts/hwmodel_core_identity.sh [OUT_DIR]
# with, optionally, HWREF_BASE=/tmp/bertlab_hwref.base HWREF_NEW=./build/bertlab_hwref (the side
# tool's `model` counts of every encoder-layer op too).
# On the paper system (configs/systems/paper-ticsat.json, in_order_core, hashed LLC, TLB), S = 4,
# 8, 16, 32, 1/2/4 cores, both arrangements:
# - `estimate --json` and `--csv` of bert-mini and bert-base inference, seq 128 (--heads none and
#   the default, the pretraining heads);
# - `estimate --json` and `--csv` of the bert-base training graph, seq 128.
# SYSTEM overrides the system file; its "core.walk" field is dropped (binaries from before the
# field refuse it), so both walk exactly; the side tool gets it with "qkv": "fused" (its layer). PARTS (default "mini base train hwref") picks a subset.
# Exit status 1 when any output differs.
set -euo pipefail
BASE=${BASE:?set BASE to the binary before the change}
NEW=${NEW:-./build/bertlab}
SYSTEM=${SYSTEM:-configs/systems/paper-ticsat.json}
PARTS=${PARTS:-mini base train hwref}
out=${1:-$(mktemp -d)}
mkdir -p "$out/base" "$out/new"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$SYSTEM" "$tmp/system.json" "$tmp/system_fused.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j.get("core", {}).pop("walk", None)
json.dump(j, open(sys.argv[2], "w"), indent=1)
j["qkv"] = "fused"  # the side tool runs the reference's fused QKV GEMM and refuses per_head
json.dump(j, open(sys.argv[3], "w"), indent=1)
PY
SYSTEM=$tmp/system.json
sweep=(--kernel 4,8,16,32 --cores 1,2,4 --arrangement both)

run_both() {  # NAME GRAPH: estimate of GRAPH by both binaries, JSON and CSV
  local name=$1 graph=$2
  for side in base new; do
    local bin=$BASE
    [[ $side == new ]] && bin=$NEW
    TIMEFORMAT="$side $name: %R s wall, %U s user"
    time "$bin" estimate --graph "$graph" --system "$SYSTEM" "${sweep[@]}" --json "$out/$side/$name.json" \
      --csv "$out/$side/$name.csv" >/dev/null
  done
}

if [[ " $PARTS " == *" mini "* ]]; then
  for heads in none default; do
    extra=()
    [[ $heads == none ]] && extra=(--heads none)
    "$NEW" graph --config configs/bert-mini.json --batch 1 --seq 128 "${extra[@]}" -o "$tmp/mini_$heads.json"
    run_both "mini_infer_seq128_heads_$heads" "$tmp/mini_$heads.json"
  done
fi
if [[ " $PARTS " == *" base "* ]]; then
  for heads in none default; do
    extra=()
    [[ $heads == none ]] && extra=(--heads none)
    "$NEW" graph --config configs/bert-base.json --batch 1 --seq 128 "${extra[@]}" -o "$tmp/base_$heads.json"
    run_both "base_infer_seq128_heads_$heads" "$tmp/base_$heads.json"
  done
fi
if [[ " $PARTS " == *" train "* ]]; then
  "$NEW" graph --config configs/bert-base.json --batch 1 --seq 128 --mode train -o "$tmp/base_train.json"
  run_both base_train_seq128 "$tmp/base_train.json"
fi
if [[ " $PARTS " == *" hwref "* && -n "${HWREF_BASE:-}" ]]; then
  HWREF_NEW=${HWREF_NEW:-./build/bertlab_hwref}
  ops="qkv k_transpose scores softmax context attn_out residual_add layernorm ffn_in gelu ffn_out"
  for side in base new; do
    bin=$HWREF_BASE
    [[ $side == new ]] && bin=$HWREF_NEW
    for op in $ops; do
      for S in 4 8 16 32; do
        for cores in 1 2 4; do
          for arr in rwma bwma; do
            "$bin" model --op "$op" --seq 128 --arrangement $arr --kernel $S --cores $cores --system "$tmp/system_fused.json"
          done
        done
      done
    done >"$out/$side/hwref_model_seq128.txt"
  done
fi
status=0
for f in "$out"/base/*; do
  g=$out/new/$(basename "$f")
  if cmp -s "$f" "$g"; then
    echo "identical: $(basename "$f")"
  else
    echo "DIFFERS:   $(basename "$f")"
    status=1
  fi
done
exit $status
