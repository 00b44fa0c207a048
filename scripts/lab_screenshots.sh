#!/usr/bin/env bash
# A screenshot of every lab's plots page for the docs (docs/labs/NAME.png, referenced from
# labs/README.md): runs each lab's grader built on the teachers' solution (with the test suite
# and -DBERTLAB_LABS=ON: build/labs/lab_NAME_solution) with --quick into a scratch folder, and
# has headless Chromium take the top of the page (--window-size), then pngquant shrinks it to a
# palette PNG; the script fails if one is over 150 KB.
#
# Usage: scripts/lab_screenshots.sh [BUILD_DIR] [LAB...]   (defaults: build, every lab)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
shift || true
labs=("$@")
[ ${#labs[@]} -gt 0 ] || labs=(profile kernel arrangement precision allreduce tokenize)
for tool in chromium pngquant; do
  command -v "$tool" >/dev/null || { echo "error: $tool is needed: scripts/setup.sh browser" >&2; exit 1; }
done
mkdir -p docs/labs
scratch="$(mktemp -d "${TMPDIR:-/tmp}/lab_screenshots.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
for lab in "${labs[@]}"; do
  grader="$(realpath "$build")/labs/lab_${lab}_solution"
  [ -x "$grader" ] || { echo "error: $grader not found: configure with -DBERTLAB_LABS=ON and the tests, and build it" >&2; exit 1; }
  echo "lab_screenshots: $lab: running the grader on the solution"
  (cd "$build" && OMP_NUM_THREADS=2 "$grader" --quick --out "$scratch/$lab" >"$scratch/$lab.log" 2>&1) ||
    { cat "$scratch/$lab.log"; echo "error: lab $lab's grader failed on the solution" >&2; exit 1; }
  png="docs/labs/$lab.png"
  tmp="$scratch/$lab.png"
  timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
    --disable-component-update --disable-sync --no-first-run --user-data-dir="$scratch/chrome" \
    --hide-scrollbars --force-device-scale-factor=1 --window-size=1300,1500 --virtual-time-budget=5000 \
    --screenshot="$tmp" "file://$scratch/$lab/$lab.html" >"$scratch/chrome.log" 2>&1 ||
    { cat "$scratch/chrome.log"; echo "error: chromium failed on lab $lab's page" >&2; exit 1; }
  pngquant --force --quality 60-90 --output "$tmp.q" "$tmp" && mv "$tmp.q" "$tmp"
  size=$(stat -c %s "$tmp")
  [ "$size" -le 153600 ] || { echo "error: $png would be $((size / 1024)) KB, over 150 KB" >&2; exit 1; }
  mv "$tmp" "$png"
  echo "lab_screenshots: wrote $png ($((size / 1024)) KB)"
done
