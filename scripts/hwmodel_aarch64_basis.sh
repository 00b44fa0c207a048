#!/usr/bin/env bash
# The AArch64 instruction basis of the in-order core model (docs/hwmodel-aarch64.md):
#   scripts/hwmodel_aarch64_basis.sh OUT.json [TICSAT_COUNTS]
# 1. cross-compiles bertlab's reference kernels (bertlab_hwref_kernel: hwmodel/reference/
#    kernel_main.cpp, kernels.h, encoder_layer.cpp) for aarch64 with Debian's
#    aarch64-linux-gnu-g++ at the flags of its CMake target (-O2, static, fmt header-only) in a
#    scratch directory, and builds the counting plugin (scripts/hwmodel_qemu_insncount.c) with
#    the host's cc;
# 2. runs every op, both arrangements, S in 4 8 16 32 at seq FIT_SEQS and CHECK_SEQS (default
#    "64 128" and "32 512") on one core under qemu-aarch64 with the plugin, each once with and
#    once without the kernel call (dry), and counts the instructions executed in the functions
#    named bertlab:: (full minus dry, as scripts/hwmodel_reference.sh counts cachegrind's);
# 3. fits per_unit and per_group (the core model's units and groups, computed by
#    hwmodel_aarch64_basis.py as core_model.cpp counts them) at the two FIT_SEQS, prints the
#    check at the others, and writes OUT.json ("bertlab-core-coefficients") from the TiC-SAT
#    counts (TICSAT_COUNTS, default hwmodel/reference/aarch64_ticsat_counts.txt: TiC-SAT's own
#    kernels for every op it has) and, for GELU, which TiC-SAT lacks, the reference counts. The
#    reference's own coefficients go into each entry's "bertlab_reference" field.
# The TiC-SAT table holds measured counts (how they were taken: docs/hwmodel-aarch64.md); this
# repository carries no build of TiC-SAT's code, so this script refits from that table rather
# than recounting TiC-SAT.
# Needs: aarch64-linux-gnu-g++ (crossbuild-essential-arm64), qemu-aarch64 from Debian's
# qemu-user (qemu-user-static cannot load plugins), cc, c++filt, fmt's headers (libfmt-dev).
# Environment: JOBS (parallel qemu runs, default 2), FIT_SEQS, CHECK_SEQS, KEEP (a directory
# to keep the build and the raw counts in, instead of a temporary one).
set -euo pipefail
usage="usage: scripts/hwmodel_aarch64_basis.sh OUT.json [TICSAT_COUNTS]"
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "$usage" >&2; exit 2; }
out=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
ticsat=${2:-$root/hwmodel/reference/aarch64_ticsat_counts.txt}
JOBS=${JOBS:-2}
FIT_SEQS=${FIT_SEQS:-64 128}
CHECK_SEQS=${CHECK_SEQS:-32 512}
export FIT_SEQS

die() { echo "hwmodel_aarch64_basis.sh: $*" >&2; exit 1; }
command -v aarch64-linux-gnu-g++ >/dev/null ||
  die "the aarch64 cross compiler aarch64-linux-gnu-g++ is missing (apt-get install crossbuild-essential-arm64)"
command -v aarch64-linux-gnu-nm >/dev/null || die "aarch64-linux-gnu-nm is missing (binutils-aarch64-linux-gnu)"
command -v qemu-aarch64 >/dev/null ||
  die "qemu-aarch64 is missing (apt-get install qemu-user; qemu-user-static's static qemu cannot load the counting plugin)"
qemu-aarch64 -h 2>/dev/null | grep -q -- '-plugin' || die "$(command -v qemu-aarch64) has no plugin support (-plugin)"
command -v cc >/dev/null || die "no host C compiler (cc) to build the counting plugin"
command -v c++filt >/dev/null || die "c++filt is missing (binutils)"
[ -f /usr/include/fmt/format.h ] || die "fmt's headers are missing (apt-get install libfmt-dev)"
[ -f "$ticsat" ] || die "the TiC-SAT count table $ticsat is missing"

if [ -n "${KEEP:-}" ]; then
  work=$KEEP
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work/inc"
ln -sfn /usr/include/fmt "$work/inc/fmt"  # fmt's headers alone, not the host's /usr/include
cc -O2 -shared -fPIC -fvisibility=hidden -Wall -Wextra -o "$work/insncount.so" "$here/hwmodel_qemu_insncount.c"
# The flags of the bertlab_hwref_kernel target (hwmodel/reference/CMakeLists.txt, Release).
aarch64-linux-gnu-g++ -std=c++20 -O2 -DNDEBUG -g -Wall -Wextra -DFMT_HEADER_ONLY -I"$root" -isystem "$work/inc" \
  -static -o "$work/hwref_kernel" "$root/hwmodel/reference/kernel_main.cpp" "$root/hwmodel/encoder_layer.cpp"
echo "built $work/hwref_kernel ($(aarch64-linux-gnu-g++ --version | head -n 1))" >&2

ref=$work/reference_counts.txt
: > "$ref"
start=$(date +%s)
for seq in $FIT_SEQS $CHECK_SEQS; do
  for op in qkv k_transpose scores softmax context attn_out residual_add layernorm ffn_in gelu ffn_out; do
    for arr in rwma bwma; do for S in 4 8 16 32; do
      echo "$op $arr $seq $S"
    done; done
  done
done | xargs -P "$JOBS" -L 1 /usr/bin/python3 "$here/hwmodel_aarch64_basis.py" ref-run qemu-aarch64 \
  "$work/insncount.so" "$work/hwref_kernel" >> "$ref"
echo "counted $(wc -l < "$ref") reference runs in $(( $(date +%s) - start )) s" >&2
/usr/bin/python3 "$here/hwmodel_aarch64_basis.py" fit "$ticsat" "$ref" > "$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out" >&2
