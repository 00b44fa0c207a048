#!/usr/bin/env bash
# Runs the ISA-sensitive tests (tests/isa_cap.sh isa_sensitive_tests) on an emulated AVX2-only CPU:
# qemu-x86_64-static -cpu EPYC-Rome (AMD Zen 2: AVX2 and FMA, no AVX-512), each test in a
# process of its own, so that the CPU's own detection (CPUID, no cap) picks AVX2 for oneDNN and
# for bertlab's kernels, and an AVX-512 instruction anywhere would stop the test (SIGILL). The
# bertlab processes a test starts run natively, capped at AVX2 (ONEDNN_MAX_CPU_ISA=AVX2): the
# same paths, but on this CPU, so the tests that compare a child's ISA report with the parent's
# cannot agree there.
#
# Usage: scripts/check_avx2_emulated.sh [BUILD_DIR]   (default build; needs bertlab_tests built)
#
# First it checks this QEMU's gathers with a displacement (vgatherdps disp(base, index, 4)),
# which oneDNN's AVX2 kernels use for table lookups (tanh): QEMU 7.2 (Debian 12) ignores the
# index there, so those kernels compute wrong values under it; the script says so, and a failed
# test whose failures all come from that is not bertlab's. Prints one line per test that failed
# and the counts; exits 1 if any test failed.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tests="$build/bertlab_tests"
[ -x "$tests" ] || { echo "check_avx2_emulated: $tests not found; build first (scripts/build.sh)" >&2; exit 2; }
command -v qemu-x86_64-static >/dev/null || { echo "check_avx2_emulated: qemu-x86_64-static is needed: scripts/setup.sh emulate" >&2; exit 2; }
cpu=EPYC-Rome
emulate() { ONEDNN_MAX_CPU_ISA=AVX2 OMP_NUM_THREADS=2 qemu-x86_64-static -cpu "$cpu" "$@"; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The probe: eight lanes gathered from table + 0x520 + 4 * index, against the table's values.
cat > "$work/gather.c" <<'EOF'
#include <stdio.h>
static float table[1024];
int main(void) {
  for (int i = 0; i < 1024; ++i) table[i] = (float)i;
  int index[8] = {1, 2, 3, 4, 5, 6, 7, 8}, wrong = 0;
  float out[8];
  __asm__ volatile(
      "vmovdqu (%2), %%ymm4\n\tvxorps %%ymm0, %%ymm0, %%ymm0\n\tvcmpeqps %%ymm0, %%ymm0, %%ymm0\n\t"
      "vxorps %%ymm3, %%ymm3, %%ymm3\n\tvgatherdps %%ymm0, 0x520(%1,%%ymm4,4), %%ymm3\n\tvmovups %%ymm3, (%0)"
      : : "r"(out), "r"(table), "r"(index) : "xmm0", "xmm3", "xmm4", "memory");
  for (int i = 0; i < 8; ++i) wrong += out[i] != table[0x520 / 4 + index[i]];
  printf("%d\n", wrong);
  return 0;
}
EOF
cc -O1 -mavx2 -o "$work/gather" "$work/gather.c"
wrong=$(qemu-x86_64-static -cpu "$cpu" "$work/gather" 2>/dev/null)
qemu=$(qemu-x86_64-static --version | head -n1)
if [ "$wrong" = 0 ]; then
  echo "check_avx2_emulated: $qemu gathers with a displacement right"
else
  echo "check_avx2_emulated: $qemu gets $wrong of 8 lanes of a gather with a displacement wrong:" \
       "oneDNN's AVX2 tanh (a table lookup) computes wrong values under it, so tests of tanh fail here"
fi
echo "check_avx2_emulated: $(emulate "$build/bertlab" isa 2>/dev/null | grep -E '^(cpu|active)' | tr -s ' ' | paste -sd';')"

source tests/isa_cap.sh
{ "$tests" "$(isa_sensitive_tests)" --list-test-names-only || true; } | sed '/^$/d' > "$work/names"  # Catch2 exits with the count
passed=0 failed=0 start=$SECONDS
while IFS= read -r name; do
  spec=${name//\\/\\\\}; spec=${spec//,/\\,}; spec=${spec//[/\\[}
  if emulate "$tests" "$spec" < /dev/null > "$work/out" 2>&1; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    what=$(grep -m1 -A1 'FAILED:' "$work/out" | tail -n1 | sed 's/^ *//' || true)  # its first failed check
    echo "  failed: $name${what:+ ($what)}"
  fi
done < "$work/names"
echo "check_avx2_emulated: $passed passed, $failed failed on qemu -cpu $cpu in $((SECONDS - start)) s"
[ "$failed" -eq 0 ]
