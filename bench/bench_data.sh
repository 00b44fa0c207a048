#!/usr/bin/env bash
# Data pipeline benchmark on the Brown corpus (fetched by scripts/fetch_corpus.sh):
#   - WordPiece vocabularies of 8k and 30k trained on 95% of the documents, with the [UNK]
#     rate and tokens per word on the 5% held out;
#   - tokenisation speed (words/s, one thread, median of 3);
#   - wall time of `bertlab prepare` over the whole corpus (seq 128, dupe factor 1, 2 threads,
#     median of 3).
# Usage: bench/bench_data.sh [BUILD_DIR]   (default: build; a Release build)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
bin="$build/bertlab"
[ -x "$bin" ] || { echo "bench_data: $bin not found; build first (scripts/build.sh)" >&2; exit 1; }
scripts/fetch_corpus.sh
brown="${BERTLAB_DATA:-$HOME/.cache/bertlab}/brown"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

median() { sort -g | sed -n 2p; }

for size in 8000 30000; do
  "$bin" vocab --corpus brown --vocab-size "$size" --out "$work/vocab$size" 2>/dev/null | grep held-out |
    sed "s/^vocab:/vocab $size:/"
done

# Plain text of the corpus: drop the tags, one sentence per line.
sed -E 's#([^ \t]+)/[^ \t]+#\1#g' "$brown"/c[a-r][0-9][0-9] | grep -v '^[[:space:]]*$' > "$work/brown.txt"
for run in 1 2 3; do
  "$bin" tokenize --vocab "$work/vocab30000" --bench < "$work/brown.txt" | sed -E 's/.*: ([0-9]+) words\/s.*/\1/'
done | median | xargs printf 'tokenize: %s words/s (median of 3, 1 thread, 30k vocab)\n'

for run in 1 2 3; do
  start=$(date +%s.%N)
  "$bin" prepare --corpus brown --vocab "$work/vocab30000" --seq-len 128 --dupe-factor 1 --threads 2 \
    --out "$work/prepared" --force >"$work/prepare.log" 2>/dev/null
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" "BEGIN { print b - a }"
done | median | xargs printf 'prepare: whole Brown corpus in %.2f s wall (median of 3, seq 128, dupe 1, 2 threads)\n'
grep -E "train:|eval:" "$work/prepare.log"
