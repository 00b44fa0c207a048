#!/usr/bin/env bash
# Proves that bertlab cross-builds for aarch64 (arm64) with Debian 12's cross toolchain and that
# its test suite passes under qemu-user-static, on a fresh Debian 12 x86-64 machine.
#
# Like scripts/check_fresh.sh, it builds a minimal Debian root with mmdebstrap (variant "apt")
# from this machine's package sources and apt settings, copies a clean checkout of HEAD (git
# archive: committed files only) into it, and runs there, as root, `check_arm64.sh --no-root`:
#   1. install: scripts/setup.sh arm64 emulate (dpkg --add-architecture arm64; the core packages, the
#      cross compiler, qemu-user-static and the arm64 libraries of third_party/manifest.tsv)
#      and scripts/arm64_overlay.sh (the arm64 packages dpkg cannot install next to amd64's)
#   2. configure: cmake with cmake/aarch64-linux-gnu.cmake, Release, -DBERTLAB_NATIVE=OFF
#   3. build: cmake --build -jN (the test list is read by running the test binary under qemu)
#   4. test: ctest, every test under qemu-aarch64-static (CMAKE_CROSSCOMPILING_EMULATOR)
# printing the time of each stage, the tests left out and why, and the counts. Exits non-zero
# at the first stage that fails.
#
# Usage: scripts/check_arm64.sh [--no-root] [--keep] [--dir DIR] [--jobs N] [--build DIR]
#   --no-root  run the four stages on this machine (the developer loop; installs with apt)
#   --keep     leave the root in place afterwards (its path is printed)
#   --dir DIR  build the root in DIR (default: a new directory under /var/tmp)
#   --jobs N   parallel build and test jobs (default 2)
#   --build D  the build directory of --no-root (default build-arm64)
# Needs root (mmdebstrap, chroot and mounts; apt in --no-root mode) and reaches only Debian's
# packages.
set -euo pipefail
cd "$(dirname "$0")/.."
src="$(pwd)"

no_root=0
keep=0
root=""
jobs=2
build=build-arm64
while [ $# -gt 0 ]; do
  case "$1" in
    --no-root) no_root=1 ;;
    --keep) keep=1 ;;
    --dir) [ $# -ge 2 ] || { echo "check_arm64: --dir needs a directory" >&2; exit 2; }; root="$2"; shift ;;
    --jobs) [ $# -ge 2 ] || { echo "check_arm64: --jobs needs a number" >&2; exit 2; }; jobs="$2"; shift ;;
    --build) [ $# -ge 2 ] || { echo "check_arm64: --build needs a directory" >&2; exit 2; }; build="$2"; shift ;;
    *) echo "check_arm64: unknown argument '$1' (expected --no-root, --keep, --dir DIR, --jobs N or --build DIR)" >&2; exit 2 ;;
  esac
  shift
done
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "check_arm64: --jobs wants a positive number, not '$jobs'" >&2; exit 2; }

stage_start=0
# arm64_loadable OVERLAY FILE...: every library the arm64 FILEs need is found by the arm64
# loader under qemu-aarch64 -L OVERLAY (as CMAKE_CROSSCOMPILING_EMULATOR runs them); else it
# names the missing ones and exits.
arm64_loadable() {
  local overlay=$1 f out
  shift
  for f in "$@"; do
    out=$(qemu-aarch64-static -L "$overlay" /lib/ld-linux-aarch64.so.1 --list "$f" 2>&1) \
      || { echo "check_arm64: the arm64 loader cannot read $f: $out" >&2; exit 1; }
    if grep -q 'not found' <<<"$out"; then
      echo "check_arm64: $f needs arm64 libraries that are not installed:" >&2
      grep 'not found' <<<"$out" | sed 's/^[[:space:]]*/  /' >&2
      echo "  (add their arm64 packages to third_party/manifest.tsv, group arm64)" >&2
      exit 1
    fi
  done
}
stage() { stage_start=$(date +%s); echo "== check_arm64: $1" >&2; }
stage_done() { echo "== check_arm64: $1: $(( $(date +%s) - stage_start )) s" >&2; }

if [ "$no_root" -eq 1 ]; then
  # ---- the four stages, on this machine ----
  stage "install: scripts/setup.sh arm64 emulate, scripts/arm64_overlay.sh"
  scripts/setup.sh arm64 emulate
  scripts/arm64_overlay.sh
  # The unpacked libraries bring no dependencies of their own: the arm64 loader must find every
  # library they need now, or every test program would fail to start after a long build.
  arm64_loadable "$(pwd)/build-arm64-overlay" build-arm64-overlay/usr/lib/aarch64-linux-gnu/libdnnl.so.2 \
    build-arm64-overlay/usr/lib/aarch64-linux-gnu/libmpi.so.40
  stage_done "install"

  stage "configure: $build (cmake/aarch64-linux-gnu.cmake, Release, BERTLAB_NATIVE=OFF)"
  toolchain=()  # CMake reads a toolchain file only when it creates the build directory
  [ -f "$build/CMakeCache.txt" ] || toolchain=(-DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake)
  cmake -S . -B "$build" "${toolchain[@]}" -DCMAKE_BUILD_TYPE=Release -DBERTLAB_NATIVE=OFF >/dev/null
  stage_done "configure"

  stage "build: cmake --build $build -j$jobs"
  cmake --build "$build" -j"$jobs"
  file -b "$build/bertlab" 2>/dev/null | grep -q aarch64 || readelf -h "$build/bertlab" | grep -q AArch64 \
    || { echo "check_arm64: $build/bertlab is not an aarch64 program" >&2; exit 1; }
  # catch_discover_tests lists the tests by running the test binary under the emulator; a binary
  # that cannot load a library lists none and the build still succeeds, so check it here.
  arm64_loadable "$(sed -n 's/^BERTLAB_ARM64_OVERLAY:[A-Z]*=//p' "$build/CMakeCache.txt")" "$build/bertlab" "$build/bertlab_tests"
  stage_done "build"

  # The tests left out, listed by the arm64 test binary itself (under the emulator).
  emulator=$(sed -n 's/^CMAKE_CROSSCOMPILING_EMULATOR:[A-Z]*=//p' "$build/CMakeCache.txt" | tr ';' ' ')
  skip=$(sed -n 's/^BERTLAB_CROSS_TEST_SKIP:[A-Z]*=//p' "$build/CMakeCache.txt")
  echo "check_arm64: tests not registered in the cross build (Catch tags $skip, tests/CMakeLists.txt):" >&2
  IFS=',' read -r -a tags <<<"$skip"
  for tag in "${tags[@]}"; do
    case "$tag" in
      "[mpirun]") why="starts its ranks with mpirun: the host's amd64 mpirun would have to launch emulated arm64 ranks" ;;
      "[html]") why="renders a page in headless Chromium, a host program that this check does not install" ;;
      *) why="left out by BERTLAB_CROSS_TEST_SKIP" ;;
    esac
    # Catch's list commands exit with the number of tests listed, hence the || true.
    # shellcheck disable=SC2086  # the emulator's command line is words
    { $emulator "$build/bertlab_tests" "$tag" --list-test-names-only 2>/dev/null || true; } | sed '/^$/d' | while IFS= read -r name; do
      echo "  skipped $tag: $name ($why)" >&2
    done
  done
  echo "  not registered: every lab_allreduce_* test (the allreduce lab's grader starts its ranks with the host's mpirun; labs/CMakeLists.txt)" >&2
  echo "  not registered: the lab_*_page tests (each renders the lab's plots page in headless Chromium, a host program this check does not install)" >&2
  if ! grep -q BERTLAB_HWTRACE_LIB "$build/tests/CMakeFiles/bertlab_tests.dir/flags.make" 2>/dev/null; then
    echo "  not compiled: the valgrind tests of tests/test_hwtrace.cpp (the hwtrace tool builds only against amd64 valgrind's tool libraries; hwmodel/reference/valgrind)" >&2
  fi

  stage "test: ctest --test-dir $build -j$jobs (under $emulator)"
  log="$build/check_arm64_ctest.log"
  set +e
  ctest --test-dir "$build" -j"$jobs" --output-on-failure --timeout 3000 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  stage_done "test"
  summary=$(grep -E '^[0-9]+% tests passed' "$log" || true)
  echo "check_arm64: ${summary:-no ctest summary} (log: $log)" >&2
  [ "$rc" -eq 0 ] || { echo "check_arm64: tests failed under qemu" >&2; exit 1; }
  echo "check_arm64: the aarch64 cross build passed its tests under qemu" >&2
  exit 0
fi

# ---- a fresh Debian 12 root ----
[ "$(id -u)" -eq 0 ] || { echo "check_arm64: run as root (mmdebstrap, chroot and mounts need it)" >&2; exit 1; }
git -C "$src" rev-parse HEAD >/dev/null 2>&1 || { echo "check_arm64: $src is not a git checkout" >&2; exit 1; }
[ -n "$root" ] || root="$(mktemp -d /var/tmp/bertlab-arm64.XXXXXX)"
mkdir -p "$root"
[ -z "$(ls -A "$root")" ] || { echo "check_arm64: $root is not empty" >&2; exit 1; }

mounted=()
cleanup() {
  local i
  for (( i=${#mounted[@]}-1; i>=0; i-- )); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
  if [ "$keep" -eq 1 ]; then echo "check_arm64: root kept in $root" >&2; else rm -rf "$root"; fi
}
trap cleanup EXIT

stage "installing mmdebstrap on the host if missing"
scripts/setup.sh check
stage_done "host tools"

# The machine's package sources, and the apt settings that make them readable (as check_fresh.sh).
stage "building a minimal Debian 12 root in $root"
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -s "$f" ] && grep -qE '^[[:space:]]*(deb|Types:)' "$f" && sources+=("$f")
done
[ ${#sources[@]} -gt 0 ] || { echo "check_arm64: no apt sources found in /etc/apt" >&2; exit 1; }
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

# The four stages in the root, with a clean environment, as a fresh root login would run them.
stage "scripts/check_arm64.sh --no-root in the root"
chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  /bin/bash -c "cd /root/bertlab && scripts/check_arm64.sh --no-root --jobs $jobs"
stage_done "cross build and tests in the root"

echo "check_arm64: the aarch64 cross build passed its tests under qemu in a fresh Debian 12 root" >&2
