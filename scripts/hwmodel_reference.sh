#!/usr/bin/env bash
# The independent reference of the arrangement estimate (docs/hwmodel.md, "Reference"):
# runs the TiC-SAT-style kernels of one BERT-base encoder layer (bertlab_hwref_kernel) under
# valgrind and compares the in-order core model (bertlab_hwref model) with what it measures.
#
#   scripts/hwmodel_reference.sh calibrate          cachegrind instruction counts at seq 32 and
#                                                  64 -> hwmodel/reference/x86_64_coefficients.json
#   scripts/hwmodel_reference.sh measure OUT [SEQ..] cachegrind (paper caches) per op, S in
#                                                  4..32, 1/2/4 cores, one process per core
#   scripts/hwmodel_reference.sh replay OUT SEQ S CORES [OPS..]  lackey traces of every core's
#                                                  share replayed together (shared LLC)
#   scripts/hwmodel_reference.sh compare OUT       model vs reference, per op (prints a table)
#
# Environment: BUILD (default ./build), JOBS (parallel valgrind runs, default 2).
set -euo pipefail
BUILD=${BUILD:-./build}
JOBS=${JOBS:-2}
KERNEL=$BUILD/bertlab_hwref_kernel
TOOL=$BUILD/bertlab_hwref
SYSTEM=configs/systems/paper-ticsat.json
COEFFS=hwmodel/reference/x86_64_coefficients.json
OPS="qkv k_transpose scores softmax context attn_out residual_add layernorm ffn_in gelu ffn_out"
# The paper's caches; cachegrind accepts them as given (sets are powers of two).
CG="--tool=cachegrind --D1=32768,2,64 --LL=1048576,8,64 --I1=32768,8,64"
here=$(cd "$(dirname "$0")" && pwd)

# cachegrind one run: OP ARR SEQ S CORES CORE SIM(yes|no) OUTFILE -> one line of counts.
cg_one() {
  local tmp
  tmp=$(mktemp)
  valgrind $CG --cache-sim="$7" --cachegrind-out-file="$tmp" "$KERNEL" "$1" "$2" "$3" "$4" "$5" "$6" >/dev/null 2>&1
  /usr/bin/python3 "$here/hwmodel_reference.py" cgsum "$tmp" "$1" "$2" "$3" "$4" "$5" "$6" >> "$8"
  rm -f "$tmp"
}
export -f cg_one
export CG KERNEL here

case "${1:-}" in
  calibrate)
    out=$(mktemp)
    for seq in 32 64; do for op in $OPS; do for arr in rwma bwma; do for S in 4 8 16 32; do
      echo "$op $arr $seq $S 1 0 no $out"
    done; done; done; done | xargs -P "$JOBS" -L 1 bash -c 'cg_one "$@"' _
    /usr/bin/python3 "$here/hwmodel_reference.py" fit "$out" "$TOOL" "$SYSTEM" > "$COEFFS.tmp"
    mv "$COEFFS.tmp" "$COEFFS"
    rm -f "$out"
    echo "wrote $COEFFS"
    ;;
  measure)
    dir=$2; shift 2
    mkdir -p "$dir"
    seqs=${*:-128}
    start=$(date +%s)
    for seq in $seqs; do for op in $OPS; do for arr in rwma bwma; do for S in 4 8 16 32; do
      for P in 1 2 4; do for ((c = 0; c < P; ++c)); do
        echo "$op $arr $seq $S $P $c yes $dir/cachegrind.txt"
      done; done
    done; done; done; done | xargs -P "$JOBS" -L 1 bash -c 'cg_one "$@"' _
    echo "measure: $(( $(date +%s) - start )) s for seq $seqs" | tee -a "$dir/timing.txt"
    ;;
  replay)
    dir=$2 seq=$3 S=$4 P=$5; shift 5
    mkdir -p "$dir"
    ops=${*:-$OPS}
    start=$(date +%s)
    for op in $ops; do for arr in rwma bwma; do
      fifos=()
      tmpd=$(mktemp -d)
      for ((c = 0; c < P; ++c)); do
        mkfifo "$tmpd/core$c"
        fifos+=("$tmpd/core$c")
        # lackey's trace goes to the log (fd 2); the program's '#hwref' line joins it there.
        valgrind --tool=lackey --trace-mem=yes --log-fd=2 "$KERNEL" "$op" "$arr" "$seq" "$S" "$P" "$c" \
          2> "$tmpd/core$c" > /dev/null &
      done
      line=$("$TOOL" replay --op "$op" --seq "$seq" --system "$SYSTEM" "${fifos[@]}")
      wait
      echo "$op $arr $seq $S $P $line" >> "$dir/replay.txt"
      rm -rf "$tmpd"
    done; done
    echo "replay: $(( $(date +%s) - start )) s for seq $seq S $S cores $P ops $ops" | tee -a "$dir/timing.txt"
    ;;
  compare)
    /usr/bin/python3 "$here/hwmodel_reference.py" compare "$2" "$TOOL" "$SYSTEM" "$COEFFS"
    ;;
  *)
    sed -n '2,16p' "$0"
    exit 2
    ;;
esac
