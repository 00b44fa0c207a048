#!/usr/bin/env bash
# Checks hwmodel's "this CPU" description against the runtime's own measured per-node times
# (docs/hwmodel-cpu.md): calibrates this machine (best of BERTLAB_PASSES whole passes), then
# for BERT-base (BERTLAB_CONFIG) batch 8, seq 128, inference and training, fp32 and bf16, profiles
# BERTLAB_REPS times and compares the profile with the median step time (a shared machine:
# one run can be several times slower than the next) with the estimate of the plain roofline
# ("cpu_model": "roofline", before) and of the calibrated model (after).
# Outputs go to BERTLAB_CPU_CHECK_OUT (default build/hwmodel-cpu-check): profiles, the
# comparisons as printed, and summary.txt. Minutes on a 2-core machine. BERTLAB_REUSE=1 keeps
# the machine.json and profiles already in the output directory and only re-estimates.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
bin=$(realpath "${BERTLAB_BIN:-build/bertlab}")
out=${BERTLAB_CPU_CHECK_OUT:-build/hwmodel-cpu-check}
reps=${BERTLAB_REPS:-3}
passes=${BERTLAB_PASSES:-3}
batch=${BERTLAB_BATCH:-8}
seq=${BERTLAB_SEQ:-128}
config=$(realpath "${BERTLAB_CONFIG:-configs/bert-base.json}")  # e.g. configs/bert-tiny.json: a quick check of the script
mkdir -p "$out"
cd "$out"

# configs/systems/this-cpu.json reads ./machine.json; the "before" description is the same
# with the plain roofline.
reuse=${BERTLAB_REUSE:-}
[ -z "$reuse" ] && "$bin" calibrate --passes "$passes" --out machine.json | tee calibrate.txt
python3 - "$src/configs/systems/this-cpu.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
d["cpu_model"] = "roofline"
d["name"] = "plain roofline: " + d["name"]
json.dump(d, open("this-cpu-roofline.json", "w"), indent=2)
EOF

[ -z "$reuse" ] && : > summary.txt
[ -n "$reuse" ] && : > resummary.txt
for mode in infer train; do
  for prec in fp32 bf16; do
    tag=$mode-$prec
    for rep in $(seq 1 "$reps"); do
      [ -n "$reuse" ] && continue
      echo "== profile $tag run $rep/$reps $(date -u +%T), load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a summary.txt
      "$bin" profile --config "$config" --mode "$mode" --batch "$batch" --seq "$seq" \
        --precision "$prec" --runs 5 --json "$tag-$rep.json" > "$tag-$rep.txt"
      grep "step:" "$tag-$rep.txt" | tee -a summary.txt
    done
    # The profile whose step time is the median of the repetitions.
    median=$(python3 - "$tag" "$reps" <<'EOF'
import json, sys
tag, reps = sys.argv[1], int(sys.argv[2])
steps = sorted((json.load(open(f"{tag}-{r}.json"))["step_seconds"], r) for r in range(1, reps + 1))
print(f"{tag}-{steps[len(steps) // 2][1]}.json")
EOF
)
    [ -z "$reuse" ] && echo "== $tag: median-step profile $median" | tee -a summary.txt
    extra=(--heads none)
    [ "$mode" = train ] && extra=(--train)
    for model in roofline calibrated; do
      sys=$src/configs/systems/this-cpu.json
      [ "$model" = roofline ] && sys=this-cpu-roofline.json
      "$bin" estimate --config "$config" --batch "$batch" --seq "$seq" "${extra[@]}" \
        --precision "$prec" --system "$sys" --compare-profile "$median" --csv "$tag-$model.csv" \
        > "$tag-$model.txt"
      { echo "== $tag, $model model vs $median"; sed -n '/^compared/,$p' "$tag-$model.txt"; } |
        tee -a "${reuse:+re}summary.txt"
    done
  done
done
