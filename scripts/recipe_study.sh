#!/usr/bin/env bash
# The pretraining recipe study of docs/training.md: one change at a time on top of the
# previous recipe, every run seeing the same number of sequences (equal compute for a given
# model, sequence length and precision), every run evaluated on the same held-out data (the
# packed eval split of the held-out documents, so that the context is the same for all).
# Prints the markdown table of docs/training.md; the runs stay in $BERTLAB_OUT/study.
#   scripts/recipe_study.sh            (after scripts/demo.sh has made $BERTLAB_OUT/vocab)
# BERTLAB_STUDY_SEQS: sequences per run (default 12800); BERTLAB_STUDY_MODEL: configs/NAME.json
# (default bert-mini); BERTLAB_THREADS: threads (default 2). Runs already done are kept.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${BERTLAB_OUT:-out}
out=$base/study
seqs=${BERTLAB_STUDY_SEQS:-12800}
threads=${BERTLAB_THREADS:-2}
model=${BERTLAB_STUDY_MODEL:-bert-mini}
bin=./build/bertlab
mkdir -p "$out"
[ -f "$base/vocab/vocab.txt" ] || $bin vocab --corpus brown --vocab-size 8000 --out "$base/vocab"
# The data sets, prepared when a run first needs them (so that a single run starts at once).
prep() {  # NAME
  local name=$1 flags
  case $name in
    pairs-128) flags=(--seq-len 128) ;;
    packed-128) flags=(--seq-len 128 --pack) ;;
    packed-128-wwm) flags=(--seq-len 128 --pack --whole-word-mask) ;;
    packed-64) flags=(--seq-len 64 --pack) ;;
    packed-128-m30) flags=(--seq-len 128 --pack --masked-lm-prob 0.3 --max-predictions 39) ;;
    packed-128-m40) flags=(--seq-len 128 --pack --masked-lm-prob 0.4 --max-predictions 52) ;;
    *) echo "recipe_study.sh: no data set $name" >&2; exit 2 ;;
  esac
  [ -f "$out/$name/meta.json" ] || $bin prepare --corpus brown --vocab "$base/vocab" --out "$out/$name" --force "${flags[@]}" >/dev/null 2>&1
}

# NAME CONFIG DATA EVAL-DATA BATCH FLAGS...: --max-steps from the sequence budget; four
# evaluations per run. BERTLAB_STUDY_RUNS="1-base 5-one-cycle" runs only those (several
# instances may share the work).
runs=$out/$seqs
mkdir -p "$runs"
run() {
  local name=$1 config=$2 data=$3 eval=$4 batch=$5; shift 5
  local steps=$((seqs / batch))
  [[ " ${BERTLAB_STUDY_RUNS:-$name} " == *" $name "* ]] || return 0
  [ -f "$runs/$name/model.safetensors" ] && return 0
  prep "$data"
  prep "$eval"
  echo "--config $config --data $data --batch-size $batch --max-steps $steps $*" > "$runs/$name.flags"
  $bin train --config "configs/$config.json" --data "$out/$data" --eval-data "$out/$eval" --out "$runs/$name" \
    --overwrite --max-steps "$steps" --batch-size "$batch" --eval-steps $((steps / 4)) --eval-batches 1000 \
    --log-steps "$steps" --threads "$threads" --seed 42 "$@" 2> "$runs/$name.log"
}
# The recipe of the main job before this study, then one change at a time.
common=(--weight-decay 0.01 --optimizer adamw)
warm8=(--warmup-steps $((seqs / 8 / 15)))
run 1-base        "$model" pairs-128      packed-128 8  "${common[@]}" --lr 1e-3 "${warm8[@]}" --precision bf16
run 2-no-nsp      "$model" pairs-128      packed-128 8  "${common[@]}" --lr 1e-3 "${warm8[@]}" --precision bf16 --no-nsp
run 3-packed      "$model" packed-128     packed-128 8  "${common[@]}" --lr 1e-3 "${warm8[@]}" --precision bf16 --no-nsp
run 4-no-dropout  "$model" packed-128     packed-128 8  "${common[@]}" --lr 1e-3 "${warm8[@]}" --precision bf16 --no-nsp --no-dropout
run 5-one-cycle   "$model" packed-128     packed-128 8  "${common[@]}" --lr 2e-3 --lr-schedule one-cycle --precision bf16 --no-nsp --no-dropout
run 6-batch-32    "$model" packed-128     packed-128 32 "${common[@]}" --lr 2e-3 --lr-schedule one-cycle --precision bf16 --no-nsp --no-dropout
run 7-wwm         "$model" packed-128-wwm packed-128 8  "${common[@]}" --lr 2e-3 --lr-schedule one-cycle --precision bf16 --no-nsp --no-dropout
run 8-fp32        "$model" packed-128     packed-128 8  "${common[@]}" --lr 2e-3 --lr-schedule one-cycle --precision fp32 --no-nsp --no-dropout
[ "$model" = bert-tiny ] || run 9-tiny bert-tiny packed-128 packed-128 8 "${common[@]}" --lr 2e-3 --lr-schedule one-cycle --precision bf16 --no-nsp --no-dropout
# Half the sequence length: twice the sequences for the same tokens.
seqs=$((seqs * 2)) run 10-seq-64  "$model" packed-64 packed-64 16 "${common[@]}" --lr 2e-3 --lr-schedule one-cycle --precision bf16 --no-nsp --no-dropout
# Candidates against the stall and the collapse of the BERT-mini main job (peak 1e-3 stalls near
# 0.1, peak 2e-3 collapses), one change at a time on top of run 11 = the main job's recipe:
# RoBERTa's Adam beta2 0.98 (the second moment follows a changing gradient scale sooner), which
# is what should let the higher peak of run 13 train; a tighter gradient clip; a new mask every
# epoch (from the second epoch on: BERTLAB_STUDY_SEQS above 10,608); batch 32 at 4x fewer steps
# with the peak scaled with the batch (square root: x2).
mini=(packed-128 packed-128)
run 11-main-job   "$model" "${mini[@]}" 8  "${common[@]}" --lr 1e-3 --lr-schedule one-cycle --precision auto --no-nsp --no-dropout
run 12-beta2      "$model" "${mini[@]}" 8  "${common[@]}" --lr 1e-3 --lr-schedule one-cycle --precision auto --no-nsp --no-dropout --adam-beta2 0.98
run 13-beta2-2e-3 "$model" "${mini[@]}" 8  "${common[@]}" --lr 2e-3 --lr-schedule one-cycle --precision auto --no-nsp --no-dropout --adam-beta2 0.98
run 14-clip-0.5   "$model" "${mini[@]}" 8  "${common[@]}" --lr 2e-3 --lr-schedule one-cycle --precision auto --no-nsp --no-dropout --adam-beta2 0.98 --max-grad-norm 0.5
run 15-dynamic    "$model" "${mini[@]}" 8  "${common[@]}" --lr 2e-3 --lr-schedule one-cycle --precision auto --no-nsp --no-dropout --adam-beta2 0.98 --dynamic-masking
run 16-batch-32   "$model" "${mini[@]}" 32 "${common[@]}" --lr 4e-3 --lr-schedule one-cycle --precision auto --no-nsp --no-dropout --adam-beta2 0.98
# A higher masking rate (Wettig et al., 2023, "Should You Mask 15% in Masked Language
# Modeling?"): more predictions per sequence for nearly the same work per step, evaluated on the
# same 15%-masked held-out data as every other run.
run 17-mask-30    "$model" packed-128-m30 packed-128 8 "${common[@]}" --lr 1e-3 --lr-schedule one-cycle --precision auto --no-nsp --no-dropout
run 18-mask-40    "$model" packed-128-m40 packed-128 8 "${common[@]}" --lr 1e-3 --lr-schedule one-cycle --precision auto --no-nsp --no-dropout
run 19-mask-40-2e-3 "$model" packed-128-m40 packed-128 8 "${common[@]}" --lr 2e-3 --lr-schedule one-cycle --precision auto --no-nsp --no-dropout --adam-beta2 0.98

# BERTLAB_STUDY_POS=1: POS tagging fine-tuned from run 5 and, the same way, from random
# weights (300 steps of 16 sentences, lr 1e-3, evaluation truncated to 64 tokens).
if [ "${BERTLAB_STUDY_POS:-0}" = 1 ] && [ -f "$runs/5-one-cycle/model.safetensors" ]; then
  [ -f "$base/brown-pos/meta.json" ] || $bin prepare --task pos --corpus brown --out "$base/brown-pos" >/dev/null
  for init in pretrained scratch; do
    extra=()
    [ "$init" = scratch ] && extra=(--from-scratch)
    [ -f "$runs/pos-$init/eval_results.json" ] ||
      $bin finetune --task token-cls --model "$runs/5-one-cycle" --train "$base/brown-pos/train.conll" \
        --eval "$base/brown-pos/eval.conll" --out "$runs/pos-$init" --overwrite --max-steps 300 --batch-size 16 \
        --max-seq-length 64 --eval-max-seq-length 64 --learning-rate 1e-3 --warmup-ratio 0.1 --eval-steps 300 \
        --threads "$threads" --precision bf16 "${extra[@]}" > "$runs/pos-$init.txt" 2>&1
    echo "POS from run 5, $init: $(grep '^eval:' "$runs/pos-$init.txt")"
  done
  echo "POS most-frequent-tag baseline: $(/usr/bin/python3 -c 'import json,sys; print(round(100*json.load(open(sys.argv[1]))["most_frequent_tag_accuracy"],1))' "$base/brown-pos/meta.json")%"
fi

/usr/bin/python3 - "$runs" "$model" <<'PY'
import json, os, sys
out, model = sys.argv[1], sys.argv[2]
rows = {
    "1-base": "the main job's recipe before: NSP pairs, batch 8, lr 1e-3 linear, dropout 0.1 (bf16)",
    "2-no-nsp": "+ no NSP (masked LM only, same pair data)",
    "3-packed": "+ packed sequences (no padding, no pairs)",
    "4-no-dropout": "+ dropout off",
    "5-one-cycle": "+ one-cycle schedule, peak lr 2e-3",
    "6-batch-32": "run 5 with batch 32 (= batch 8 x --accum-steps 4): a quarter of the steps",
    "7-wwm": "run 5 with whole-word masking",
    "8-fp32": "run 5 in fp32 instead of bf16",
    "9-tiny": "run 5 with BERT-tiny",
    "10-seq-64": "run 5 at seq 64, batch 16 (same tokens; its own seq-64 held-out data)",
    "11-main-job": "the main job's recipe: run 5 at peak 1e-3, --precision auto",
    "12-beta2": "run 11 with Adam beta2 0.98",
    "13-beta2-2e-3": "run 12 at peak 2e-3",
    "14-clip-0.5": "run 13 with --max-grad-norm 0.5 (instead of 1.0)",
    "15-dynamic": "run 13 with --dynamic-masking (a new mask every epoch)",
    "16-batch-32": "run 13 with batch 32 at peak 4e-3: a quarter of the steps",
    "17-mask-30": "run 11 with 30% of the tokens masked in training (held-out data: 15% as always)",
    "18-mask-40": "run 11 with 40% masked in training",
    "19-mask-40-2e-3": "run 18 at peak 2e-3 with Adam beta2 0.98 (run 13's settings)",
}
print(f"{model}, seq 128 unless said; held-out masked-LM accuracy at each quarter of the run:\n")
print("| run | recipe | steps x batch | MLM acc at 1/4, 1/2, 3/4, end | most frequent token | train seq/s (under load) |")
print("|---|---|---|---|---|---|")
for name, what in rows.items():
    d = os.path.join(out, name)
    if not os.path.exists(os.path.join(d, "metrics.jsonl")):
        continue
    flags = open(os.path.join(out, name + ".flags")).read().split()
    batch, steps = flags[flags.index("--batch-size") + 1], flags[flags.index("--max-steps") + 1]
    lines = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
    evals = [l for l in lines if "eval_mlm_accuracy" in l]
    if not evals:
        continue
    ev = evals[-1]
    curve = ", ".join(f"{e['eval_mlm_accuracy']:.3f}" for e in evals)
    st = [l for l in lines if "seq_per_s" in l]
    print(f"| {name} | {what} | {ev['step']}{'' if str(ev['step']) == steps else ' of ' + steps} x {batch} | {curve} | {ev['eval_most_frequent_accuracy']:.3f} | {st[-1]['seq_per_s']:.0f} |")
PY
