#!/usr/bin/env bash
# A lab's plots page, checked as a student would see it: runs the grader (built on the teachers'
# solution) into a scratch folder, optionally with oneDNN and bertlab's kernels capped at one
# instruction-set level (ONEDNN_MAX_CPU_ISA, as tests/run_at_isa.sh does), then loads its page
# in headless Chromium. Fails when the grader does not end with every check passed, when the
# page is blank (no chart) or a chart did not lay out with marks, or when a script on the page
# raised an error. Where the level has no native bf16, the grader must say before any work that
# it skips the bf16 part ("[SKIP]") and the page must say so too (class "skipped"), for the labs
# that measure bf16 (--bf16-lab). ctest runs it per lab and level (labs/CMakeLists.txt); a level
# this CPU does not have, or its own (the uncapped test runs it), is skipped (exit 77).
#
# Usage: check_page.sh BERTLAB GRADER LAB CAP|- [--bf16-lab] [-- grader arguments...]
set -euo pipefail
bertlab="$1" grader="$2" lab="$3" cap="$4"
shift 4
bf16_lab=0
if [ "${1:-}" = "--bf16-lab" ]; then bf16_lab=1; shift; fi
if [ "${1:-}" = "--" ]; then shift; fi
if [ "$cap" != "-" ]; then
  source "$(dirname "$0")/../../tests/isa_cap.sh"
  isa_cap "$bertlab" "$cap" "lab_${lab}_page"
else
  unset ONEDNN_MAX_CPU_ISA DNNL_MAX_CPU_ISA
fi
command -v chromium >/dev/null || { echo "FAIL: headless Chromium is needed: run scripts/setup.sh browser"; exit 1; }
scratch="$(mktemp -d "${TMPDIR:-/tmp}/lab_page_${lab}.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
echo "level: $("$bertlab" isa | grep -E '^(active|bf16)' | tr -s ' ' | paste -sd';')"
start=$SECONDS
set +e
"$grader" "$@" --out "$scratch/out" >"$scratch/grader.log" 2>&1
rc=$?
set -e
cat "$scratch/grader.log"
echo "grader: exit $rc after $((SECONDS - start)) s"
[ "$rc" = 0 ] || { echo "FAIL: the grader on the solution exited $rc"; exit 1; }
page="$scratch/out/$lab.html"
[ -s "$page" ] || { echo "FAIL: no page at $page"; exit 1; }
if [ "$bf16_lab" = 1 ] && "$bertlab" isa | grep -q '^bf16: *no'; then
  grep -q '^\[SKIP\]' "$scratch/grader.log" || { echo "FAIL: no native bf16 here, but the grader printed no [SKIP] line"; exit 1; }
  # The [SKIP] line comes before the first check's verdict: said before any work starts.
  first_skip="$(grep -n '^\[SKIP\]' "$scratch/grader.log" | head -n1 | cut -d: -f1)"
  first_check="$(grep -nE '^\[(PASS|FAIL|INFO)\]' "$scratch/grader.log" | head -n1 | cut -d: -f1)"
  [ "$first_skip" -lt "${first_check:-999999}" ] || { echo "FAIL: the [SKIP] line came after the work started"; exit 1; }
  grep -q 'class="skipped"' "$page" || { echo "FAIL: the page does not say that bf16 was skipped"; exit 1; }
fi
set +e
timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
  --disable-component-update --disable-sync --no-first-run --user-data-dir="$scratch/chrome" \
  --enable-logging=stderr --v=0 --virtual-time-budget=5000 --dump-dom "file://$page" \
  >"$scratch/dom.html" 2>"$scratch/chrome.log"
crc=$?
set -e
[ "$crc" = 0 ] || { cat "$scratch/chrome.log"; echo "FAIL: chromium exited $crc"; exit 1; }
attr() { grep -o "$1=\"[0-9]*\"" "$scratch/dom.html" | head -n1 | grep -o '[0-9]\+' || echo -1; }
expected="$(attr data-charts-expected)" rendered="$(attr data-charts-rendered)" errors="$(attr data-js-errors)"
echo "page: $expected charts declared, $rendered rendered with marks, $errors script errors"
if grep -q 'Uncaught' "$scratch/chrome.log"; then grep 'Uncaught' "$scratch/chrome.log"; echo "FAIL: a script error"; exit 1; fi
[ "$errors" = 0 ] || { echo "FAIL: $errors script errors on the page (or the page's script did not run)"; exit 1; }
[ "$expected" -gt 0 ] || { echo "FAIL: a blank page: no chart"; exit 1; }
[ "$rendered" = "$expected" ] || { echo "FAIL: $rendered of $expected charts laid out with marks"; exit 1; }
echo "PASS: $lab's page, $expected charts"
