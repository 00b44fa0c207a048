#!/usr/bin/env bash
# The speed of each ISA level this CPU has, against PyTorch in the same run: bench/compare_torch.sh
# at the CPU's own level and again capped (ONEDNN_MAX_CPU_ISA) at each lower level it has, one
# markdown row per workload: bertlab seq/s, the share of the GEMM peak measured in that run,
# PyTorch seq/s (capped alike: OpenBLAS and ATen at the same level) and the ratio.
# Usage: bench/isa_table.sh [build dir] [LEVEL ...]   (default: every level from AVX2 up; RUNS=5)
# The raw output of each level is kept in $ISA_TABLE_LOG (default /tmp/isa_table.*.log).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
bin=$build/bertlab
caps="$(env -u ONEDNN_MAX_CPU_ISA -u DNNL_MAX_CPU_ISA "$bin" isa --caps | grep -xE 'AVX2|AVX512_CORE|AVX512_CORE_BF16|AVX512_CORE_AMX')"
levels=("$@")
[ ${#levels[@]} -gt 0 ] || mapfile -t levels <<<"$caps"
own="$(tail -n1 <<<"$caps")"
log=${ISA_TABLE_LOG:-$(mktemp /tmp/isa_table.XXXXXX)}
echo "| level | workload | bertlab seq/s | share of the measured GEMM peak | PyTorch seq/s | ratio |"
echo "|---|---|---|---|---|---|"
for level in "${levels[@]}"; do
  if [ "$level" = "$own" ]; then cap=(env -u ONEDNN_MAX_CPU_ISA); name="$level (this CPU)"; else cap=(env ONEDNN_MAX_CPU_ISA="$level"); name="$level (capped)"; fi
  "${cap[@]}" bench/compare_torch.sh "$build" > "$log.$level" 2>&1 || { echo "isa_table: compare_torch failed at $level (see $log.$level)" >&2; exit 1; }
  awk -v level="$name" '
    /^== / { sub(/^== /, ""); workload = $0 }
    /throughput:/ { ours = $2 }
    /achieved:/ { match($0, /= [0-9]+% of the measured [a-z0-9]+ GEMM peak [0-9.]+/); share = substr($0, RSTART + 2, RLENGTH - 2) }
    /^torch / { match($0, /: [0-9.]+ sequences/); theirs = substr($0, RSTART + 2, RLENGTH - 12)
                printf "| %s | %s | %s | %s | %s | %.2fx |\n", level, workload, ours, share, theirs, ours / theirs }
  ' "$log.$level"
done
