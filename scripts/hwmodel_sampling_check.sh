#!/usr/bin/env bash
# The sampled core walk ("core": {"walk": "sampled"}, docs/hwmodel.md) against the exact walk, per
# node class, on the paper system (configs/systems/paper-ticsat.json) at S = 4, 8, 16, 32, 1/2/4
# cores, both arrangements:
#   scripts/hwmodel_sampling_check.sh [OUT_DIR]
# GRAPHS (default "base-infer-512 base-train-128 large-train-128") picks the graphs; each is
# estimated twice (exact, sampled) and scripts/hwmodel_sampling_check.py prints the worst
# per-node relative error of cycles, instructions, L1, LLC and TLB misses and DRAM bytes, and
# of the whole-graph BWMA-over-RWMA speedup. The exact runs take long (BERT-large training at
# seq 128: minutes per configuration); KERNELS and CORES narrow the sweep.
set -euo pipefail
BIN=${BIN:-./build/bertlab}
GRAPHS=${GRAPHS:-base-infer-512 base-train-128 large-train-128}
KERNELS=${KERNELS:-4,8,16,32}
CORES=${CORES:-1,2,4}
out=${1:-$(mktemp -d)}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
for walk in exact sampled; do
  /usr/bin/python3 - configs/systems/paper-ticsat.json "$out/system_$walk.json" "$walk" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j.setdefault("core", {})["walk"] = sys.argv[3]
json.dump(j, open(sys.argv[2], "w"))
PY
done
for g in $GRAPHS; do
  IFS=- read -r model mode seq <<<"$g"
  args=(--config "configs/bert-$model.json" --batch 1 --seq "$seq")
  [[ $mode == train ]] && args+=(--mode train)
  "$BIN" graph "${args[@]}" -o "$out/$g.graph.json"
  for walk in exact sampled; do
    TIMEFORMAT="$g, $walk walk: %R s wall, %U s user"
    time "$BIN" estimate --graph "$out/$g.graph.json" --system "$out/system_$walk.json" --kernel "$KERNELS" \
      --cores "$CORES" --arrangement both --csv "$out/$g.$walk.csv" >/dev/null
  done
  /usr/bin/python3 "$here/hwmodel_sampling_check.py" "$out/$g.exact.csv" "$out/$g.sampled.csv" "$g" | tee "$out/$g.md"
done
