#!/usr/bin/env bash
# Packs one lab for Gradescope's autograder (labs/README.md, "For teachers"):
#   scripts/lab_autograder.sh NAME OUTDIR [GRADER ARGS...]
# writes OUTDIR/NAME-autograder/ (setup.sh, run_autograder and the checkout as bertlab/, which
# Gradescope unpacks to /autograder/source/bertlab) and OUTDIR/NAME-autograder.zip with those at the root of the archive
# (by `zip`, or Python's zipfile where zip is not installed),
# ready to upload. The checkout is the committed tree (git archive HEAD) without the teachers'
# solutions. setup.sh installs the packages (scripts/setup.sh) and builds bertlab and the lab's
# grader once, on the stubs; run_autograder copies the student's student.cpp over the stub,
# rebuilds the grader and runs
#   bertlab lab check NAME --json /autograder/results/results.json -- GRADER ARGS
# GRADER ARGS default to --quick: the same checks on smaller inputs, with no prepared corpus
# needed (pass e.g. --steps 50 --data DIR to grade on full inputs). A submission that does not
# compile, or a grader that writes no results, gets a results.json of score 0 that says why.
set -euo pipefail
die() { echo "lab_autograder.sh: $*" >&2; exit 2; }
[ $# -ge 2 ] || die "usage: scripts/lab_autograder.sh NAME OUTDIR [GRADER ARGS...] (NAME: bertlab lab list)"
name=$1 outdir=$2
shift 2
grader_args=("$@")
[ ${#grader_args[@]} -gt 0 ] || grader_args=(--quick)
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
[ -f "$repo/labs/$name/lab.cmake" ] || die "NAME '$name': no lab of that name (labs/$name/lab.cmake is missing; the labs are: $(cd "$repo/labs" && ls -d */ | tr -d / | grep -v common | tr '\n' ' '))"
[ -d "$outdir" ] || die "OUTDIR '$outdir': no such directory"
outdir="$(cd "$outdir" && pwd)"
command -v git >/dev/null || die "git is needed to pack the committed checkout"
# The CMake options the lab's grader needs (apps/cmd_lab.cpp kLabs: lab 2 also routes bertlab's
# own layernorm to the student's file).
cmake_options="-DBERTLAB_LABS=ON"
[ "$name" = kernel ] && cmake_options="$cmake_options -DBERTLAB_LAB_KERNEL=ON"

pack="$outdir/$name-autograder"
tmp="$(mktemp -d "$outdir/.$name-autograder.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/pack/bertlab"
git -C "$repo" archive --format=tar HEAD | tar -x -C "$tmp/pack/bertlab"
rm -rf "$tmp"/pack/bertlab/labs/*/solution

quoted_args=$(printf ' %q' "${grader_args[@]}")
cat > "$tmp/pack/setup.sh" <<EOF
#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image.
set -euo pipefail
cd /autograder/source/bertlab
scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBERTLAB_NATIVE=OFF $cmake_options
cmake --build build -j2 --target bertlab lab_$name
EOF

cat > "$tmp/pack/run_autograder" <<EOF
#!/usr/bin/env bash
# Gradescope runs this for every submission: the student's labs/$name/student.cpp, submitted as
# student.cpp, is built into the lab's grader, which writes /autograder/results/results.json.
set -uo pipefail
results=/autograder/results/results.json
mkdir -p /autograder/results
# A results.json of score 0 with a message, for when the grader cannot run.
fail_results() {
  python3 -c 'import json, sys; json.dump({"score": 0, "output": sys.argv[1], "visibility": "visible", "tests": []}, open(sys.argv[2], "w"), indent=2)' "\$1" "\$results"
  exit 0
}
cd /autograder/source/bertlab
[ -f /autograder/submission/student.cpp ] || fail_results "No student.cpp in the submission: submit your labs/$name/student.cpp as student.cpp."
cp /autograder/submission/student.cpp labs/$name/student.cpp
if ! build_log=\$(cmake --build build -j2 --target bertlab lab_$name 2>&1); then
  fail_results "Your student.cpp does not compile:
\$(printf '%s\n' "\$build_log" | grep -E 'error|student.cpp' | head -n 40)"
fi
rm -f "\$results"
./build/bertlab lab check $name --json "\$results" --$quoted_args
[ -f "\$results" ] || fail_results "The grader stopped before writing its results; the log is in the autograder's stdout."
exit 0
EOF
chmod +x "$tmp/pack/setup.sh" "$tmp/pack/run_autograder"

rm -rf "$pack"
mv "$tmp/pack" "$pack"
echo "packed: $pack (setup.sh, run_autograder and bertlab/ go at the root of the zip)"
# zip when installed, else Python's zipfile (which keeps the files' modes too: run_autograder
# stays executable).
if command -v zip >/dev/null; then
  (cd "$pack" && zip -qr "$outdir/.$name-autograder.zip.tmp" setup.sh run_autograder bertlab)
else
  (cd "$pack" && /usr/bin/python3 -m zipfile -c "$outdir/.$name-autograder.zip.tmp" setup.sh run_autograder bertlab)
fi
mv "$outdir/.$name-autograder.zip.tmp" "$outdir/$name-autograder.zip"
echo "zip: $outdir/$name-autograder.zip"
