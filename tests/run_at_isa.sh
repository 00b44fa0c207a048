#!/usr/bin/env bash
# Runs the ISA-sensitive tests with oneDNN and bertlab's own kernels capped at one level
# (ONEDNN_MAX_CPU_ISA, ops/isa.h), so that a machine with AVX-512 or AMX also runs the paths of
# an AVX2 laptop. ctest runs it once per level (tests/CMakeLists.txt); a level this CPU does not
# have, or its own highest level (which every other test already runs), is skipped (exit 77).
#
# Usage: run_at_isa.sh BERTLAB BERTLAB_TESTS CAP
# The ISA-sensitive tests: isa_sensitive_tests (isa_cap.sh).
set -euo pipefail
bertlab="$1" tests="$2" cap="$3"
source "$(dirname "$0")/isa_cap.sh"
isa_cap "$bertlab" "$cap" "the rest of the suite"
filter="$(isa_sensitive_tests)"
echo "ONEDNN_MAX_CPU_ISA=$cap: $(ONEDNN_MAX_CPU_ISA="$cap" "$bertlab" isa | grep -E '^(active|bf16)' | tr -s ' ' | paste -sd';')"
ONEDNN_MAX_CPU_ISA="$cap" exec "$tests" "$filter" "${@:4}"
