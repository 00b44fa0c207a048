#!/usr/bin/env bash
# Seed corpora for the libFuzzer harnesses, made by bertlab itself (not committed: they hold
# binary checkpoints). Writes OUT/<harness>/ for every harness of fuzz/ and OUT/data (a small
# prepared directory, FUZZ_DATA_DIR of fuzz_meta).
#   scripts/fuzz_seeds.sh [OUT=build-fuzz/seeds] [BERTLAB=build/bertlab]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build-fuzz/seeds}
bin=${2:-$root/build/bertlab}
[ -x "$bin" ] || { echo "fuzz_seeds: $bin not built (the normal build)" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/bertlab_seeds.XXXXXX)
trap 'rm -rf "$work"' EXIT
q() { "$@" >/dev/null 2>&1; }

for h in safetensors config vocab tokenizer infer_input shard meta trainer_state graph system machine task_data; do
  rm -rf "${out:?}/$h"; mkdir -p "$out/$h"
done
corpus=$root/tests/data/corpus_small.txt
q "$bin" vocab --corpus "$corpus" --vocab-size 120 --out "$work/vocab"
rm -rf "$out/data"
q "$bin" prepare --corpus "$corpus" --vocab "$work/vocab" --seq-len 16 --max-predictions 3 --dupe-factor 1 \
  --instances-per-shard 4 --out "$out/data"
# A micro BERT (1 layer, hidden size 4, bert-tiny's other settings): its checkpoint files (7 and
# 13 kB) and inference graph (16 kB) are whole files within the harnesses' -max_len, where
# bert-tiny's (a 4 MB optimizer state, a 254 kB model) were cut into files no reader accepts.
# (Its training graph, 69 kB, is still cut at fuzz_graph's 32 kB.)
/usr/bin/python3 - "$root/configs/bert-tiny.json" "$work/micro.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(hidden_size=4, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8, max_position_embeddings=16)
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
q "$bin" train --config "$work/micro.json" --data "$out/data" --batch-size 2 --max-steps 1 --threads 1 \
  --out "$work/train"
q "$bin" init --config "$root/tests/reference/tiny_bert/config.json" --out "$work/model" || true

# safetensors: a model and its optimizer state (the micro BERT's checkpoint), an infer output.
cp "$work/train/checkpoint-1/model.safetensors" "$out/safetensors/model"
cp "$work/train/checkpoint-1/optimizer.safetensors" "$out/safetensors/optimizer"
printf '{"input_ids": [[2, 10, 11, 3], [2, 12, 3, 0]], "attention_mask": [[1, 1, 1, 1], [1, 1, 1, 0]]}' >"$out/infer_input/batch.json"
printf '{"input_ids": [[2, 10, 3]], "token_type_ids": [[0, 0, 0]]}' >"$out/infer_input/short.json"
q "$bin" infer --model "$root/tests/reference/tiny_bert" --input "$out/infer_input/short.json" --output "$out/safetensors/infer_out"
# configs
for c in "$root"/configs/bert-*.json "$root/tests/reference/tiny_bert/config.json"; do cp "$c" "$out/config/$(basename "$(dirname "$c")")_$(basename "$c")"; done
# vocab.txt (first byte 0) and tokenizer_config.json (first byte 1)
{ printf '\0'; cat "$work/vocab/vocab.txt"; } >"$out/vocab/vocab"
{ printf '\0'; head -40 "$root/tests/data/vocab_small/vocab.txt"; } >"$out/vocab/vocab_small"
[ -f "$work/vocab/tokenizer_config.json" ] && { printf '\1'; cat "$work/vocab/tokenizer_config.json"; } >"$out/vocab/config"
printf '\1{"do_lower_case": false, "strip_accents": null, "model_max_length": 512}' >"$out/vocab/config2"
# tokenizer input: lines of the fixture corpora
# (short seeds: the tokenizer's cost grows with the input, and the fuzzer keeps to their sizes)
split -l 4 -a 3 "$root/tests/data/tokenizer_cases.txt" "$out/tokenizer/cases_"
head -c 400 "$corpus" >"$out/tokenizer/corpus"
# shards and meta.json
for s in "$out"/data/*.shard; do cp "$s" "$out/shard/$(basename "$s")"; done
cp "$out/data/meta.json" "$out/meta/meta.json"
cp "$work/train/checkpoint-1/trainer_state.json" "$out/trainer_state/"
# graph JSON
q "$bin" graph --config "$work/micro.json" --seq 8 -o "$out/graph/micro_infer.json" || true
q "$bin" graph --config "$work/micro.json" --seq 8 --mode train -o "$out/graph/micro_train.json" || true
# system and machine descriptions shipped with bertlab
for s in "$root"/configs/systems/*.json; do cp "$s" "$out/system/"; done
for m in "$root"/tests/data/*machine*.json "$root"/configs/*machine*.json "$root"/docs/profiling/machine.json; do [ -f "$m" ] && cp "$m" "$out/machine/"; done
q "$bin" calibrate --out "$out/machine/calibrated.json" --seconds 0.05 --square 256 --bandwidth-mb 8 --seq 32 --batch 1 || true
# fine-tuning data (first byte: 0 CSV, 1 TSV, 2 JSON lines, 3 CoNLL; +4 labels required): the
# `prepare --task` output on the Brown fixture (CoNLL, CSV), and the CSV as TSV and JSON lines.
q "$bin" prepare --task pos --corpus "$root/tests/data/brown_sample" --eval-fraction 0.5 --out "$work/pos" || true
q "$bin" prepare --task genre --corpus "$root/tests/data/brown_sample" --vocab "$work/vocab" --seq-len 16 \
  --eval-fraction 0.5 --out "$work/genre" || true
shopt -s nullglob
for f in "$work"/pos/*.conll; do
  { printf '\7'; head -c 4000 "$f"; } >"$out/task_data/$(basename "$f")"
  { printf '\3'; head -c 4000 "$f" | cut -f1; } >"$out/task_data/words_$(basename "$f")"
done
for f in "$work"/genre/*.csv; do
  { printf '\4'; head -c 4000 "$f"; } >"$out/task_data/$(basename "$f")"
  /usr/bin/python3 - "$f" "$out/task_data/$(basename "$f" .csv)" <<'PY'
import csv, json, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))[:20]
with open(sys.argv[2] + ".tsv", "w") as t:
    t.write("\5" + "".join("\t".join(c.replace("\t", " ").replace("\n", " ") for c in r) + "\n" for r in rows))
with open(sys.argv[2] + ".jsonl", "w") as j:
    j.write("\6" + "".join(json.dumps(dict(zip(rows[0], r))) + "\n" for r in rows[1:]))
PY
done
for h in "$out"/*/; do echo "fuzz_seeds: $(basename "$h"): $(ls "$h" | wc -l) files"; done
