#!/usr/bin/env bash
# Runs the ISA-sensitive tests with oneDNN and bertlab's own kernels capped at one level
# (ONEDNN_MAX_CPU_ISA, ops/isa.h), so that a machine with AVX-512 or AMX also runs the paths of
# an AVX2 laptop. ctest runs it once per level (tests/CMakeLists.txt); a level this CPU does not
# have, or its own highest level (which every other test already runs), is skipped (exit 77).
#
# Usage: run_at_isa.sh BERTLAB BERTLAB_TESTS CAP
# ISA-sensitive: everything but the tests of pure models, data preparation, reports and tools,
# which run no kernel (a new test is ISA-sensitive unless its tag is listed here).
set -euo pipefail
bertlab="$1" tests="$2" cap="$3"
insensitive="[hwmodel] [hwmodel-reference] [hwmodel_cpu] [arrangement] [cluster] [alignment] [data] [tokenizer] \
[vocab] [prepare] [brown] [fuzz] [labs] [html] [chart] [graph] [config] [valgrind]"
source "$(dirname "$0")/isa_cap.sh"
isa_cap "$bertlab" "$cap" "the rest of the suite"
filter="~[.]"  # hidden tests (the slow reference checks) stay out, as in the rest of the suite
for t in $insensitive; do filter+="~$t"; done
echo "ONEDNN_MAX_CPU_ISA=$cap: $(ONEDNN_MAX_CPU_ISA="$cap" "$bertlab" isa | grep -E '^(active|bf16)' | tr -s ' ' | paste -sd';')"
ONEDNN_MAX_CPU_ISA="$cap" exec "$tests" "$filter" "${@:4}"
