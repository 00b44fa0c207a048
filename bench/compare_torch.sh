#!/usr/bin/env bash
# bertlab against PyTorch CPU in the same session, on the shapes of the issues:
# BERT-base inference (batch 8, seq 128), BERT-base and BERT-mini (batch 8 and 32) training, in fp32 and in
# mixed bf16 (PRECISIONS="fp32 bf16" by default; bf16 needs avx512_bf16 or AMX).
# Usage: bench/compare_torch.sh [build dir]   (numbers vary on a shared machine: medians)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh bench  # PyTorch on Debian uses the system BLAS: OpenBLAS (OpenMP), not netlib
bin=${1:-build}/bertlab
runs=${RUNS:-5}
# ONEDNN_MAX_CPU_ISA=AVX2 caps bertlab (ops/isa.h); PyTorch gets the same level through its own
# settings: OpenBLAS's Haswell kernels and ATen's avx2 dispatch.
case "${ONEDNN_MAX_CPU_ISA:-}" in
  AVX2|avx2) export OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2; echo "== capped at AVX2 (PyTorch: OpenBLAS Haswell, ATen avx2)" ;;
  AVX512_CORE*|avx512_core*) export OPENBLAS_CORETYPE=SkylakeX ATEN_CPU_CAPABILITY=avx512; echo "== capped at $ONEDNN_MAX_CPU_ISA (PyTorch: OpenBLAS SkylakeX, ATen avx512)" ;;
esac
default_precisions="fp32 bf16"
$bin isa | grep -q '^bf16: *native' || default_precisions=fp32  # no native bf16 here, or capped below it
for precision in ${PRECISIONS:-$default_precisions}; do
  for spec in "bert-base 8 infer" "bert-base 8 train" "bert-mini 8 train" "bert-mini 32 train"; do
    set -- $spec
    echo "== $1 batch $2 seq 128 $3 $precision"
    $bin bench --config configs/$1.json --batch $2 --seq 128 --mode $3 --runs $runs --precision $precision
    /usr/bin/python3 bench/torch_bert.py --config configs/$1.json --batch $2 --seq 128 --mode $3 --runs $runs \
      --precision $precision
  done
done
