#!/usr/bin/env bash
# scripts/lab_autograder.sh packs a lab as labs/README.md promises: OUTDIR/NAME-autograder.zip
# (and the same as a folder) with setup.sh, an executable run_autograder and the committed
# checkout as bertlab/ at its root, without any lab's solution/ folder; run_autograder runs the
# lab's check with --json into Gradescope's results path and `-- --quick`, or the arguments given
# after OUTDIR instead. Skipped (77) outside a git checkout, which the script needs.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
git -C "$repo" rev-parse --verify -q HEAD >/dev/null 2>&1 || { echo "skipped: $repo is not a git checkout"; exit 77; }
out="$(mktemp -d "${TMPDIR:-/tmp}/lab_autograder_test.XXXXXX")"
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$repo/scripts/lab_autograder.sh" tokenize "$out"
[ -d "$out/tokenize-autograder/bertlab/labs/tokenize" ] || fail "no folder $out/tokenize-autograder with the checkout"
/usr/bin/python3 - "$out/tokenize-autograder.zip" <<'PY' || fail "the zip is not as promised (above)"
import re, stat, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = set(z.namelist())
problems = []
for need in ["setup.sh", "run_autograder", "bertlab/labs/tokenize/student.cpp", "bertlab/labs/tokenize/grader.cpp",
             "bertlab/CMakeLists.txt"]:
    if need not in names:
        problems.append(f"{need} is missing")
if "run_autograder" in names and not (z.getinfo("run_autograder").external_attr >> 16) & stat.S_IXUSR:
    problems.append("run_autograder is not executable")
solutions = sorted(n for n in names if re.match(r"bertlab/labs/[^/]+/solution/", n))
if solutions:
    problems.append(f"the teachers' solutions are packed: {solutions[:3]}")
run = z.read("run_autograder").decode() if "run_autograder" in names else ""
if "lab check tokenize --json" not in run or "-- --quick" not in run:
    problems.append("run_autograder does not run `bertlab lab check tokenize --json ... -- --quick`")
print("\n".join(problems) or f"{len(names)} entries, as promised")
sys.exit(1 if problems else 0)
PY
"$repo/scripts/lab_autograder.sh" tokenize "$out" --steps 5 >/dev/null
grep -q -- '-- --steps 5$' "$out/tokenize-autograder/run_autograder" || fail "the arguments after OUTDIR do not replace --quick"
! grep -q -- '--quick' "$out/tokenize-autograder/run_autograder" || fail "--quick is still passed when arguments are given"
echo "PASS"
