#!/usr/bin/env bash
# The main job on the default model and data: installs what is missing, builds, creates a
# BERT-mini model directory, runs inference on a sample batch and benchmarks BERT-base.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
out=${BERTLAB_OUT:-out}
mkdir -p "$out"
./build/bertlab init --config configs/bert-mini.json --out "$out/bert-mini" --overwrite
./build/bertlab infer --model "$out/bert-mini" --input tests/reference/tiny_bert/input.json \
  --output "$out/infer-sample.safetensors"
./build/bertlab bench --config configs/bert-base.json --batch 8 --seq 128 --mode infer
