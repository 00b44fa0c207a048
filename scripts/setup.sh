#!/usr/bin/env bash
# Installs the Debian packages bertlab needs, and only those that are missing. The list, with
# the version each package was tested at, is third_party/manifest.tsv: the "core" group always,
# other groups when named ("setup.sh browser corpus"). Idempotent and quiet when everything is
# present. Run as root (or as a user with sudo). apt verifies every package against the signed
# index of the configured Debian sources; the tested version is installed when those sources
# still have it, otherwise their current version (a Debian security update), with a note.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
manifest="$here/../third_party/manifest.tsv"
die() { echo "setup.sh: $*" >&2; exit 1; }

groups=(core)
fetch_corpus=0
for extra in "$@"; do
  case "$extra" in
    browser|node|bench|check|reference|fuzz|emulate) groups+=("$extra") ;;  # chromium, pngquant | npm | OpenBLAS for PyTorch, tc | mmdebstrap | valgrind | clang | qemu-user-static
    python) groups+=("$extra") ;;  # the Python module (pybind11, python3-dev, pip) and its notebooks' tests (nbconvert, matplotlib, pandas)
    arm64) groups+=("$extra") ;;  # the aarch64 cross build: cross compiler, qemu-user-static, arm64 libraries (multiarch)
    corpus) fetch_corpus=1 ;;  # fetch_corpus.sh installs the node group if npm is missing
    *) echo "setup.sh: unknown package group '$extra' (expected: browser, node, corpus, bench, check, reference, fuzz, emulate, arm64, python)" >&2; exit 2 ;;
  esac
done

# name=version pairs of the requested groups' Debian rows.
mapfile -t wanted < <(awk -F'\t' -v groups=" ${groups[*]} " \
  '!/^#/ && $2 == "debian" && index(groups, " " $3 " ") { print $1 "=" $4 }' "$manifest")
[ ${#wanted[@]} -gt 0 ] || die "no Debian packages found for groups '${groups[*]}' in $manifest"

# The node group is there for its npm command: an npm that is already installed from elsewhere
# (NodeSource's nodejs bundles one and conflicts with Debian's npm package) is used as it is.
node_pkgs=" $(awk -F'\t' '!/^#/ && $2 == "debian" && $3 == "node" { printf "%s ", $1 }' "$manifest")"
have_npm=0
if command -v npm >/dev/null 2>&1 && ! dpkg-query -W -f='${Status}' npm 2>/dev/null | grep -q "install ok installed"; then
  have_npm=1
fi

missing=()
for pv in "${wanted[@]}"; do
  p=${pv%%=*}
  if [ "$have_npm" -eq 1 ] && [[ "$node_pkgs" == *" $p "* ]]; then
    continue
  fi
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$pv")
done
if [ "$have_npm" -eq 1 ] && [[ " ${groups[*]} " == *" node "* ]]; then
  echo "setup: using the npm already installed ($(command -v npm), $(npm --version 2>/dev/null)); not installing Debian's nodejs and npm"
fi

if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null \
      || die "missing packages (${missing[*]%%=*}) and this is not root and sudo cannot run without a password: run as root or install them"
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  log="$(mktemp)"
  trap 'rm -f "$log"' EXIT
  # The arm64 group's PKG:arm64 rows are multiarch installs: dpkg must know the architecture
  # before apt reads the package lists.
  if [[ " ${groups[*]} " == *" arm64 "* ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "setup: adding the arm64 architecture to dpkg (dpkg --add-architecture arm64)"
    $sudo dpkg --add-architecture arm64
  fi
  $sudo apt-get update -qq --error-on=any >"$log" 2>&1 \
    || die "cannot read the Debian package sources (apt-get update failed: $(grep -m1 -E '^(E|W):' "$log" || tail -n1 "$log"))"
  install=()
  for pv in "${missing[@]}"; do
    p=${pv%%=*} v=${pv#*=}
    if apt-cache madison "$p" | awk -F'|' '{gsub(/ /, "", $2); print $2}' | grep -qxF "$v"; then
      install+=("$pv")
    else
      install+=("$p")
      echo "setup: $p $v (tested) is no longer in the package sources; installing $(apt-cache policy "$p" | awk '/Candidate/{print $2}')"
    fi
  done
  echo "setup: installing ${install[*]%%=*}"
  $sudo apt-get install -y -qq --no-install-recommends "${install[@]}" >"$log" 2>&1 \
    || die "apt-get install failed: $(grep -m1 '^E:' "$log" || tail -n1 "$log")"
fi

if [ "$fetch_corpus" -eq 1 ]; then
  "$here/fetch_corpus.sh"
fi
