#!/usr/bin/env bash
# Unpacks the arm64 packages that cannot be installed next to their amd64 twins into an
# overlay directory (default: build-arm64-overlay/ in the checkout) for the aarch64 cross
# build (cmake/aarch64-linux-gnu.cmake). These are the manifest's "debian-unpacked" rows:
#   libdnnl-dev:arm64   Multi-Arch: same, but its dnnl_config.h differs from amd64's
#                       (DNNL_GPU_RUNTIME NONE instead of OCL), so dpkg refuses to unpack it
#   libopenmpi3:arm64, libpmix2:arm64, libmunge2:arm64
#                       libmunge2 has no Multi-Arch field, so libpmix2:arm64 and with it
#                       libopenmpi3:arm64 would remove the amd64 Open MPI of the native build
#   libopenmpi-dev:arm64 (declares Conflicts: libopenmpi-dev) and libdnnl2:arm64 (the overlay's
#                       dnnl CMake config names the library next to itself)
# apt-get download checks each .deb against the signed index, like an install; dpkg-deb -x
# unpacks it without running maintainer scripts. The rest of the arm64 libraries are real
# multiarch installs (setup.sh arm64). Idempotent: a stamp names the unpacked versions.
# Usage: scripts/arm64_overlay.sh [DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
manifest="$here/../third_party/manifest.tsv"
dir="${1:-$here/../build-arm64-overlay}"
die() { echo "arm64_overlay: $*" >&2; exit 1; }
command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || die "needs apt-get and dpkg-deb (Debian)"

mapfile -t wanted < <(awk -F'\t' '!/^#/ && $2 == "debian-unpacked" && $3 == "arm64" { print $1 "=" $4 }' "$manifest")
[ ${#wanted[@]} -gt 0 ] || die "no debian-unpacked arm64 rows in $manifest"
stamp="$dir/.bertlab-overlay"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${wanted[*]}" ]; then
  exit 0
fi

dpkg --print-foreign-architectures | grep -qx arm64 \
  || die "arm64 is not a dpkg architecture here: run scripts/setup.sh arm64 first"
rm -rf "$dir"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
debs="$(mktemp -d)"
trap 'rm -rf "$debs"' EXIT
# apt-get download fetches as the _apt user when it can: let it write the directory.
id _apt >/dev/null 2>&1 && chown _apt "$debs"
get=()
for pv in "${wanted[@]}"; do
  p=${pv%%=*} v=${pv#*=}
  if apt-cache madison "$p" | awk -F'|' '{gsub(/ /, "", $2); print $2}' | grep -qxF "$v"; then
    get+=("$p=$v")
  else
    echo "arm64_overlay: $p $v (tested) is no longer in the package sources; unpacking $(apt-cache policy "$p" | awk '/Candidate/{print $2}')"
    get+=("$p")
  fi
done
(cd "$debs" && apt-get download -qq "${get[@]}" >/dev/null) || die "apt-get download ${get[*]} failed"
for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$dir"; done
echo "${wanted[*]}" >"$stamp"
echo "arm64_overlay: unpacked ${get[*]%%=*} into $dir"
