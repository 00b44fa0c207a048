#!/usr/bin/env bash
# Configures and builds bertlab (Release) into ./build: the portable build (runs on any x86-64
# CPU with AVX2, or any aarch64 CPU) unless BERTLAB_NATIVE=ON is set in the environment.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBERTLAB_NATIVE="${BERTLAB_NATIVE:-OFF}" >/dev/null
cmake --build build -j"$(nproc)"
