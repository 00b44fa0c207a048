#!/usr/bin/env bash
# Proves that the README's two commands work on a fresh Debian 12 machine, where packages
# installed by earlier work are not there to hide a missing install step.
#
# Builds a minimal Debian root with mmdebstrap (variant "apt": the essential packages and apt,
# nothing else), from this machine's own package sources and apt settings. It copies a clean
# checkout of HEAD into it (git archive: committed files only), then runs there, as root:
#   1. scripts/test.sh                      (the README's test command)
#   2. BERTLAB_STEPS=30 scripts/demo.sh     (the README's main job, shortened)
# and prints the time of each stage. Exits non-zero at the first stage that fails.
#
# Usage: scripts/check_fresh.sh [--keep] [--dir DIR]
#   --keep     leave the root in place afterwards (its path is printed)
#   --dir DIR  build the root in DIR (default: a new directory under /var/tmp)
# Needs root (mmdebstrap, chroot and mounts) and reaches only Debian's packages and npm.
set -euo pipefail
cd "$(dirname "$0")/.."
src="$(pwd)"

keep=0
root=""
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --dir) [ $# -ge 2 ] || { echo "check_fresh: --dir needs a directory" >&2; exit 2; }; root="$2"; shift ;;
    *) echo "check_fresh: unknown argument '$1' (expected --keep or --dir DIR)" >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" -eq 0 ] || { echo "check_fresh: run as root (mmdebstrap, chroot and mounts need it)" >&2; exit 1; }
git -C "$src" rev-parse HEAD >/dev/null 2>&1 || { echo "check_fresh: $src is not a git checkout" >&2; exit 1; }
[ -n "$root" ] || root="$(mktemp -d /var/tmp/bertlab-fresh.XXXXXX)"
mkdir -p "$root"
[ -z "$(ls -A "$root")" ] || { echo "check_fresh: $root is not empty" >&2; exit 1; }

stage_start=0
stage() { stage_start=$(date +%s); echo "== check_fresh: $1" >&2; }
stage_done() { echo "== check_fresh: $1: $(( $(date +%s) - stage_start )) s" >&2; }

mounted=()
cleanup() {
  local i
  for (( i=${#mounted[@]}-1; i>=0; i-- )); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
  if [ "$keep" -eq 1 ]; then echo "check_fresh: root kept in $root" >&2; else rm -rf "$root"; fi
}
trap cleanup EXIT

stage "installing mmdebstrap on the host if missing"
scripts/setup.sh check
stage_done "host tools"

# The machine's package sources, and the apt settings that make them readable (for example a
# snapshot mirror that needs Acquire::Check-Valid-Until "false").
stage "building a minimal Debian 12 root in $root"
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -s "$f" ] && grep -qE '^[[:space:]]*(deb|Types:)' "$f" && sources+=("$f")
done
[ ${#sources[@]} -gt 0 ] || { echo "check_fresh: no apt sources found in /etc/apt" >&2; exit 1; }
aptopts=()
for f in /etc/apt/apt.conf.d/*; do
  grep -q '^[[:space:]]*Acquire::' "$f" 2>/dev/null && aptopts+=("--aptopt=$f")
done
mmdebstrap --quiet --variant=apt "${aptopts[@]}" bookworm "$root" "${sources[@]}"
stage_done "minimal root"

stage "copying a clean checkout of HEAD ($(git -C "$src" rev-parse --short HEAD)) into the root"
mkdir -p "$root/root/bertlab"
git -C "$src" archive HEAD | tar -x -C "$root/root/bertlab"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# This machine's network path may re-sign TLS with a local CA (the host trusts it through
# NODE_EXTRA_CA_CERTS and /usr/local/share/ca-certificates); a fresh machine on the same
# network trusts it the same way, so the root gets the host's CA bundle for npm.
host_ca="${NODE_EXTRA_CA_CERTS:-/etc/ssl/certs/ca-certificates.crt}"
ca_env=""
if [ -s "$host_ca" ]; then
  mkdir -p "$root/etc/ssl/certs"
  cp "$host_ca" "$root/etc/ssl/certs/host-ca-certificates.crt"
  ca_env="NODE_EXTRA_CA_CERTS=/etc/ssl/certs/host-ca-certificates.crt"
fi
for m in proc sys dev dev/pts dev/shm; do
  mkdir -p "$root/$m"
  case "$m" in
    proc) mount -t proc proc "$root/proc" ;;
    sys) mount -t sysfs sysfs "$root/sys" ;;
    dev/shm) mount -t tmpfs -o mode=1777 shm "$root/dev/shm" ;;
    *) mount --bind "/$m" "$root/$m" ;;
  esac
  mounted+=("$root/$m")
done
stage_done "checkout"

# Runs a command line in the root with a clean environment, as a fresh root login would.
in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 $ca_env \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd /root/bertlab && $1"
}

stage "scripts/test.sh (the README's test command)"
in_root "scripts/test.sh"
stage_done "scripts/test.sh"

stage "BERTLAB_STEPS=30 scripts/demo.sh (the README's main job, shortened)"
in_root "BERTLAB_STEPS=30 scripts/demo.sh"
stage_done "scripts/demo.sh"

echo "check_fresh: both README commands passed in a fresh Debian 12 root" >&2
