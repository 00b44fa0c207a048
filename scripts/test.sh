#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test through ctest: the whole suite at this
# CPU's own instruction-set level, and the ISA-sensitive tests again with oneDNN and bertlab's
# kernels capped at each lower level it has (the isa_* tests, tests/run_at_isa.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# chromium: the profiler HTML report test renders in it; valgrind: the hwtrace tool and its
# tests; qemu-user-static: a CPU without AVX2, emulated (tests/test_isa.cpp); python: pybind11
# and what the Python module's pytest and notebook tests need (tests/python/)
scripts/setup.sh browser reference emulate python
scripts/build.sh
caps="$(env -u ONEDNN_MAX_CPU_ISA -u DNNL_MAX_CPU_ISA build/bertlab isa --caps | grep -vx ALL || true)"  # none on aarch64
own="$(tail -n1 <<<"$caps")"
lower="$(grep -xE 'AVX2|AVX512_CORE|AVX512_CORE_BF16' <<<"$caps" | grep -vx "$own" | paste -sd' ' || true)"
echo "test.sh: ISA levels: the whole suite at this CPU's own (${own:-portable}); the ISA-sensitive tests again at: ${lower:-none}"
ctest --test-dir build --output-on-failure -j"$(nproc)"
