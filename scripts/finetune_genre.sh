#!/usr/bin/env bash
# Genre classification (the 15 Brown categories, chunks of up to 128 word pieces) on the Brown
# documents held out from pretraining: fine-tunes a pretrained model and, the same way, the same
# model shape from random weights, and reports both against the majority class.
#   scripts/finetune_genre.sh MODEL_DIR [OUT]    (after scripts/demo.sh: MODEL_DIR=out/bert-mini-brown)
# BERTLAB_GENRE_STEPS sets the optimizer steps of each run (default 300, batch 16, about 40%
# of an epoch of the 12,525 training chunks), BERTLAB_GENRE_LR the peak learning rate (1e-4).
# bf16 GEMMs when the CPU has them (--precision auto). BERTLAB_GENRE_INITS="pretrained" leaves
# out the run from random weights (the main job's setting, for its time budget).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: scripts/finetune_genre.sh MODEL_DIR [OUT]}
out=${2:-out}
steps=${BERTLAB_GENRE_STEPS:-300}
lr=${BERTLAB_GENRE_LR:-1e-4}
bin=./build/bertlab
mkdir -p "$out"
[ -f "$out/brown-genre/meta.json" ] || $bin prepare --task genre --corpus brown --vocab "$model" --out "$out/brown-genre"
inits=${BERTLAB_GENRE_INITS:-pretrained scratch}
for init in $inits; do
  case $init in pretrained | scratch) ;; *) echo "finetune_genre.sh: BERTLAB_GENRE_INITS: '$init' is not pretrained or scratch" >&2; exit 2 ;; esac
  extra=()
  [ "$init" = scratch ] && extra=(--from-scratch)
  $bin finetune --task seq-cls --model "$model" --train "$out/brown-genre/train.csv" \
    --eval "$out/brown-genre/eval.csv" --out "$out/genre-$init" --overwrite --max-steps "$steps" \
    --batch-size 16 --max-seq-length 128 --learning-rate "$lr" --warmup-ratio 0.1 --precision auto \
    --eval-steps "$steps" --log-steps 50 "${extra[@]}" > "$out/genre-$init.txt"
done
/usr/bin/python3 - "$out" $inits <<'PY'
import json, sys
out, inits = sys.argv[1], sys.argv[2:]
meta = json.load(open(f"{out}/brown-genre/meta.json"))
print(f"genre, {len(meta['eval_documents'])} held-out documents ({meta['eval_examples']} chunks, {meta['labels']} classes), accuracy:")
for init, name in (("pretrained", "pretrained, fine-tuned"), ("scratch", "random init, fine-tuned")):
    if init not in inits:
        continue
    r = json.load(open(f"{out}/genre-{init}/eval_results.json"))
    r.update(json.load(open(f"{out}/genre-{init}/train_results.json")))
    print(f"  {name:<26} {100 * r['eval_accuracy']:.1f}%  (macro-F1 {r['eval_macro_f1']:.3f}, {r['train_seq_per_s']:.0f} seq/s)")
print(f"  {'majority class':<26} {100 * meta['majority_class_accuracy']:.1f}%")
PY
