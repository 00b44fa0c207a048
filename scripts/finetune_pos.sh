#!/usr/bin/env bash
# Part-of-speech tagging on the Brown documents held out from pretraining: fine-tunes a
# pretrained model, fine-tunes the same model shape from random weights the same way (the gain
# from pretraining), and reports both against the most-frequent-tag baseline.
#   scripts/finetune_pos.sh MODEL_DIR [OUT]    (after scripts/demo.sh: MODEL_DIR=out/bert-mini-brown)
# BERTLAB_FT_STEPS sets the optimizer steps of each run (default 1000, batch 16, about 30%
# of an epoch of the 54,650 training sentences), BERTLAB_FT_LR the peak learning rate (5e-4).
# bf16 GEMMs when the CPU has them (--precision auto).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: scripts/finetune_pos.sh MODEL_DIR [OUT]}
out=${2:-out}
steps=${BERTLAB_FT_STEPS:-1000}
lr=${BERTLAB_FT_LR:-5e-4}
bin=./build/bertlab
mkdir -p "$out"
[ -f "$out/brown-pos/meta.json" ] || $bin prepare --task pos --corpus brown --out "$out/brown-pos"
for init in pretrained scratch; do
  extra=()
  [ "$init" = scratch ] && extra=(--from-scratch)
  $bin finetune --task token-cls --model "$model" --train "$out/brown-pos/train.conll" \
    --eval "$out/brown-pos/eval.conll" --out "$out/pos-$init" --overwrite --max-steps "$steps" \
    --batch-size 16 --max-seq-length 64 --eval-max-seq-length 512 --learning-rate "$lr" --warmup-ratio 0.1 --precision auto --group-by-length \
    --eval-steps "$steps" --log-steps 100 "${extra[@]}" > "$out/pos-$init.txt"
done
/usr/bin/python3 - "$out" "$model" <<'PY'
import json, os, sys
out, model = sys.argv[1], sys.argv[2]
meta = json.load(open(f"{out}/brown-pos/meta.json"))
metrics = os.path.join(model, "metrics.jsonl")
if os.path.exists(metrics):
    print("pretraining (held-out masked-LM accuracy):")
    for m in map(json.loads, open(metrics)):
        if "eval_mlm_accuracy" in m:
            print(f"  step {m['step']:>5}: {m['eval_mlm_accuracy']:.3f} (most frequent token {m['eval_most_frequent_accuracy']:.3f})")
print(f"POS tagging, {len(meta['eval_documents'])} held-out documents ({meta['labels']} tags), token accuracy:")
for init, name in (("pretrained", "pretrained, fine-tuned"), ("scratch", "random init, fine-tuned")):
    r = json.load(open(f"{out}/pos-{init}/eval_results.json"))
    r.update(json.load(open(f"{out}/pos-{init}/train_results.json")))
    print(f"  {name:<26} {100 * r['eval_accuracy']:.1f}%  (macro-F1 {r['eval_macro_f1']:.3f}, {r['train_seq_per_s']:.0f} seq/s)")
print(f"  {'most frequent tag per word':<26} {100 * meta['most_frequent_tag_accuracy']:.1f}%")
print(f"  {'majority tag':<26} {100 * meta['majority_class_accuracy']:.1f}%")
PY
