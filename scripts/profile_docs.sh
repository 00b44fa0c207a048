#!/usr/bin/env bash
# Regenerates every number quoted in docs/profiling.md: calibrates this machine, profiles
# BERT-base inference (batch 8, seq 128, with the node-timing overhead), and runs the training
# sweeps of BERT-base and BERT-large at seq 128 and 512 (fp32/bf16, accum 1/4). Outputs go to
# docs/profiling/ (Markdown, CSV, HTML, JSON, trace).
# Slow on a 2-core machine (minutes; BERT-large training steps take long): run when idle.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BERTLAB_BIN:-build/bertlab}
out=${BERTLAB_PROFILE_OUT:-docs/profiling}
threads=${BERTLAB_THREADS:-$(nproc)}
mkdir -p "$out"

"$bin" calibrate --out "$out/machine.json" --threads "$threads" | tee "$out/calibrate.txt"

"$bin" profile --config configs/bert-base.json --mode infer --batch 8 --seq 128 --threads "$threads" \
  --machine "$out/machine.json" --runs 7 --top 15 --overhead \
  --json "$out/base-infer-b8-s128.json" --trace "$out/base-infer-b8-s128.trace.json" \
  --markdown "$out/base-infer-b8-s128.md" --html "$out/base-infer-b8-s128.html" \
  | tee "$out/base-infer-b8-s128.txt"

"$bin" profile --config configs/bert-base.json --mode infer --threads "$threads" \
  --machine "$out/machine.json" --runs 3 --sweep batch=1,8 --sweep seq=128,512 --sweep precision=fp32,bf16 \
  --csv "$out/base-infer-sweep.csv" --html "$out/base-infer-sweep.html" --markdown "$out/base-infer-sweep.md" \
  | tee "$out/base-infer-sweep.txt"

# Training: micro-batch size BERTLAB_TRAIN_BATCH (default 4: sequences per micro-batch that a
# 2-core machine profiles in minutes), accum 1 and 4, fp32 and bf16, seq 128 and 512.
for model in base large; do
  batch=${BERTLAB_TRAIN_BATCH:-4}
  "$bin" profile --config "configs/bert-$model.json" --mode train --batch "$batch" --threads "$threads" \
    --machine "$out/machine.json" --runs "${BERTLAB_TRAIN_RUNS:-3}" --sweep seq=128,512 --sweep precision=fp32,bf16 --sweep accum=1,4 \
    --csv "$out/$model-train-sweep.csv" --html "$out/$model-train-sweep.html" \
    --markdown "$out/$model-train-sweep.md" | tee "$out/$model-train-sweep.txt"
done

# Per-node fixed costs: the same small step with 1 thread and with all threads. On a machine
# shared with other processes, every OpenMP parallel region with more threads than free cores
# waits for the scheduler, which small memory-bound nodes cannot amortise.
threads_check() {
  for t in 1 "$threads"; do
    echo "### --threads $t"
    "$bin" profile --config configs/bert-base.json --mode infer --batch 1 --seq 128 --threads "$t" \
      --machine "$out/machine.json" --runs 7 --top 0 | grep -E "step:|GFLOP per step|projection|attention batched|softmax|layernorm"
  done
}
threads_check > "$out/threads-check.txt"

# One file with every generated table, linked from docs/profiling.md.
{
  echo "# Generated profiling results"
  echo
  echo "Written by scripts/profile_docs.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ); do not edit by hand."
  for f in base-infer-b8-s128 base-infer-sweep base-train-sweep large-train-sweep; do
    echo
    echo "## $f"
    echo
    cat "$out/$f.md"
  done
  echo
  echo "## Threads: BERT-base inference, batch 1, seq 128, 1 thread vs all"
  echo
  echo '```'
  cat "$out/threads-check.txt"
  echo '```'
  echo
  echo "## Node-timing overhead (BERT-base inference, batch 8, seq 128)"
  echo
  grep "node timing overhead" "$out/base-infer-b8-s128.txt" || true
} > "$out/results.md"
