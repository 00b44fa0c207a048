#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh browser reference  # chromium: the profiler HTML report test renders in it; valgrind: the hwtrace tool and its tests
scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"
