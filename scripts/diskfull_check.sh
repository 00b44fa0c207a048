#!/usr/bin/env bash
# Disk-full test (issues 14 and 44; needs root for the tmpfs): trains (MODE=train: BERT-tiny
# pretraining; MODE=finetune: the tiny test model fine-tuned) into a small tmpfs until a
# checkpoint no longer fits. The run must stop with exit 1 and a clear error (ENOSPC), leave no
# .tmp directory, and the newest checkpoint left must verify and resume.
#   scripts/diskfull_check.sh [BUILD_DIR=build] [SIZE=12m; finetune: 2m] [MODE=train|finetune]
set -uo pipefail
build=${1:-build}
mode=${3:-train}
[ "$mode" = train ] && size=${2:-12m} || size=${2:-2m}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$build" && pwd)/bertlab
[ "$(id -u)" -eq 0 ] || { echo "diskfull: needs root (mount -t tmpfs)"; exit 2; }
work=$(mktemp -d /tmp/bertlab_diskfull.XXXXXX)
mnt=$work/full
mkdir -p "$mnt"
mount -t tmpfs -o size="$size" tmpfs "$mnt" || exit 2
trap 'umount "$mnt"; rm -rf "$work"' EXIT
case "$mode" in
  train)
    "$bin" vocab --corpus "$root/tests/data/corpus_small.txt" --vocab-size 200 --out "$work/vocab" >/dev/null 2>&1 || exit 2
    "$bin" prepare --corpus "$root/tests/data/corpus_small.txt" --vocab "$work/vocab" --seq-len 32 --out "$work/data" \
      >/dev/null 2>&1 || exit 2
    run=(train --config "$root/configs/bert-tiny.json" --data "$work/data" --batch-size 2 --max-steps 40 --save-steps 2
         --threads 1)
    resume=(train --data "$work/data" --batch-size 2 --max-steps 41 --threads 1) ;;
  finetune)
    mkdir -p "$work/model"
    cp "$root/tests/reference/tiny_bert/config.json" "$root/tests/reference/tiny_bert/model.safetensors" \
       "$root/tests/data/vocab_small/vocab.txt" "$work/model/"
    printf 'text,label\nthe dog,dog\nthe fox,fox\na lazy dog,dog\nquick fox,fox\n' >"$work/train.csv"
    run=(finetune --task seq-cls --model "$work/model" --train "$work/train.csv" --eval "$work/train.csv"
         --batch-size 2 --max-steps 40 --save-steps 2 --eval-steps 3 --threads 1)
    resume=("${run[@]}") ;;
  *) echo "diskfull: MODE is train or finetune, not $mode" >&2; exit 2 ;;
esac
failed=0
for limit in ${LIMITS:-0 2}; do
  rm -rf "${mnt:?}"/*
  "$bin" "${run[@]}" --save-total-limit $limit --out "$mnt/out" >"$work/log" 2>&1
  status=$?
  error=$(grep -m1 "error:" "$work/log")
  tmp=$(find "$mnt/out" -maxdepth 1 -name ".*tmp*" | wc -l)
  newest=$(ls -d "$mnt"/out/checkpoint-* 2>/dev/null | sort -t- -k2 -n | tail -1)
  resumed=no
  if [ -n "$newest" ] && "$bin" "${resume[@]}" --resume "$newest" --out "$work/resumed$limit" --overwrite \
       >"$work/rlog" 2>&1; then resumed=yes; fi
  [ $resumed = yes ] || echo "  resume: $(grep -m1 error: "$work/rlog")"
  verdict=ok
  if [ $status -ne 1 ] || ! grep -q "No space left on device" <<<"$error" || [ "$tmp" -ne 0 ] || [ $resumed != yes ]; then
    verdict=FAILED; failed=$((failed + 1))
  fi
  echo "diskfull ($mode): --save-total-limit $limit: exit $status, $tmp temporary files left, newest checkpoint" \
       "$(basename "${newest:-none}") resumes: $resumed; $verdict"
  echo "  ${error:0:200}"
done
[ $failed -eq 0 ]
