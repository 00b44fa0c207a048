#!/usr/bin/env bash
# bertlab against PyTorch CPU in the same session, on the shapes of the issues:
# BERT-base inference (batch 8, seq 128), BERT-base and BERT-mini training, in fp32 and in
# mixed bf16 (PRECISIONS="fp32 bf16" by default; bf16 needs avx512_bf16 or AMX).
# Usage: bench/compare_torch.sh [build dir]   (numbers vary on a shared machine: medians)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh bench  # PyTorch on Debian uses the system BLAS: OpenBLAS (OpenMP), not netlib
bin=${1:-build}/bertlab
runs=${RUNS:-5}
for precision in ${PRECISIONS:-fp32 bf16}; do
  for spec in "bert-base 8 infer" "bert-base 8 train" "bert-mini 32 train"; do
    set -- $spec
    echo "== $1 batch $2 seq 128 $3 $precision"
    $bin bench --config configs/$1.json --batch $2 --seq 128 --mode $3 --runs $runs --precision $precision
    /usr/bin/python3 bench/torch_bert.py --config configs/$1.json --batch $2 --seq 128 --mode $3 --runs $runs \
      --precision $precision
  done
done
