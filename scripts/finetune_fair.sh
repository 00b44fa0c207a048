#!/usr/bin/env bash
# A fair comparison of fine-tuning from a pretrained model and from random weights (issue #42),
# on the Brown documents held out from pretraining:
#   1. `prepare --task TASK --validation-fraction 0.05`: a validation split cut from the
#      *training* documents; the held-out documents are only ever the test set.
#   2. For each start (pretrained, scratch), a learning-rate sweep at the smaller budget: one run
#      per rate, the same steps, batch and seed, each scored on the validation split; the rate
#      with the best validation accuracy is that start's rate (scratch and pretrained each get
#      the rate that suits them). A best rate at the edge of the grid is not trusted: twice (or
#      half) of it is tried too, up to two steps each way.
#   3. Each larger budget sweeps again, on the same validation split: the previous budget's rate
#      and half of it (a quarter too when the half wins), since a longer run usually wants a
#      lower rate. Every run's kept model is scored once on the held-out documents
#      (`finetune --test`; no choice looks at them); the table shows the chosen rate's.
# Prints, per budget, the held-out accuracy of both starts and the baselines, and writes
# OUT/TASK-fair.json (what scripts/demo.sh's final table reads).
#   scripts/finetune_fair.sh pos|genre MODEL_DIR [OUT]
# BERTLAB_FT_BUDGETS: the budgets in optimizer steps of batch 16, smallest first (pos: "250
# 1000"; genre: "200"); BERTLAB_FT_LRS: the first sweep's peak learning rates (pos: "5e-4 1e-3 2e-3";
# genre: "1e-4 3e-4"); BERTLAB_FT_INITS: "pretrained scratch" (default) or one of them.
# bf16 GEMMs when the CPU has them (--precision auto). The runs stay in OUT/TASK-fair/.
set -euo pipefail
cd "$(dirname "$0")/.."
task=${1:?usage: scripts/finetune_fair.sh pos|genre MODEL_DIR [OUT]}
model=${2:?usage: scripts/finetune_fair.sh pos|genre MODEL_DIR [OUT]}
out=${3:-out}
bin=./build/bertlab
case $task in
  pos)
    budgets=${BERTLAB_FT_BUDGETS:-250 1000} lrs=${BERTLAB_FT_LRS:-5e-4 1e-3 2e-3}
    data=$out/brown-pos-fair files=(conll)
    flags=(--task token-cls --batch-size 16 --max-seq-length 64 --eval-max-seq-length 512 --group-by-length) ;;
  genre)
    budgets=${BERTLAB_FT_BUDGETS:-200} lrs=${BERTLAB_FT_LRS:-1e-4 3e-4}
    data=$out/brown-genre-fair files=(csv)
    flags=(--task seq-cls --batch-size 16 --max-seq-length 128) ;;
  *) echo "finetune_fair.sh: the task is pos or genre, not '$task'" >&2; exit 2 ;;
esac
inits=${BERTLAB_FT_INITS:-pretrained scratch}
for init in $inits; do
  case $init in pretrained | scratch) ;; *) echo "finetune_fair.sh: BERTLAB_FT_INITS: '$init' is not pretrained or scratch" >&2; exit 2 ;; esac
done
read -r -a budget_list <<< "$budgets"
for b in "${budget_list[@]}" $lrs; do
  [[ $b =~ ^[0-9.e+-]+$ ]] || { echo "finetune_fair.sh: '$b' in BERTLAB_FT_BUDGETS or BERTLAB_FT_LRS is not a number" >&2; exit 2; }
done
ext=${files[0]}
[ -f "$data/validation.$ext" ] ||
  $bin prepare --task "$task" --corpus brown --vocab "$model" --validation-fraction 0.05 --out "$data" --force >/dev/null
runs=$out/$task-fair
mkdir -p "$runs"
# NAME LR STEPS INIT: one run, its log beside it; skipped when its results exist.
run() {
  local name=$1 lr=$2 steps=$3 init=$4 extra=()
  [ "$init" = scratch ] && extra=(--from-scratch)
  [ -f "$runs/$name/test_results.json" ] && return 0
  $bin finetune "${flags[@]}" --model "$model" --train "$data/train.$ext" --eval "$data/validation.$ext" \
    --test "$data/eval.$ext" --out "$runs/$name" --overwrite --max-steps "$steps" --learning-rate "$lr" \
    --warmup-ratio 0.1 --precision auto --seed 42 --eval-steps "$steps" --log-steps "$steps" "${extra[@]}" \
    > "$runs/$name.txt" 2>&1 || { echo "finetune_fair.sh: $name failed:" >&2; tail -5 "$runs/$name.txt" >&2; exit 1; }
}
accuracy() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$@"; }
# NAME: the validation accuracy of a finished run.
validation() { accuracy "$runs/$1/eval_results.json" eval_accuracy; }
# DIRECTION LR TRIED...: twice (up) or half (down) LR when LR is the largest (smallest) tried, else "".
beyond() {
  /usr/bin/python3 -c 'import sys; v = [float(x) for x in sys.argv[3:]]; b = float(sys.argv[2])
print(f"{b * 2:g}" if sys.argv[1] == "up" and b == max(v) else f"{b / 2:g}" if sys.argv[1] == "down" and b == min(v) else "")' "$@"
}
for init in $inits; do
  for b in "${budget_list[@]}"; do
    best_lr="" best=-1 tried=()
    sweep() {  # LR: one run of budget b's sweep; keeps the best
      local lr=$1 acc
      echo "$task: $init, lr $lr, $b steps" >&2
      run "$init-$b-$lr" "$lr" "$b" "$init"
      tried+=("$lr")
      acc=$(validation "$init-$b-$lr")
      if /usr/bin/python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) else 1)' "$acc" "$best"; then
        best=$acc best_lr=$lr
      fi
    }
    if [ "$b" = "${budget_list[0]}" ]; then
      # The grid; a best rate at its edge is not trusted: twice (half) of it too, twice at most.
      for lr in $lrs; do sweep "$lr"; done
      directions="up down" steps_each=2
    else
      # A longer run usually wants a lower rate: the previous budget's rate and half of it, and
      # a quarter when the half wins.
      previous=$(cat "$runs/$init-$prev.lr")
      sweep "$previous"
      sweep "$(beyond down "$previous" "$previous")"
      directions=down steps_each=1
    fi
    for direction in $directions; do
      for ((i = 0; i < steps_each; ++i)); do
        edge=$(beyond "$direction" "$best_lr" "${tried[@]}")
        [ -n "$edge" ] || break
        sweep "$edge"
      done
    done
    echo "$best_lr" > "$runs/$init-$b.lr"
    prev=$b
  done
  # OUT/TASK-INIT: the model of the largest budget.
  ln -sfn "$task-fair/$init-${budget_list[-1]}-$(cat "$runs/$init-${budget_list[-1]}.lr")" "$out/$task-$init"
done
/usr/bin/python3 - "$task" "$runs" "$data" "$budgets" "$lrs" $inits <<'PY'
import json, os, sys
task, runs, data, budgets, lrs, inits = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(), sys.argv[5].split(), sys.argv[6:]
meta = json.load(open(os.path.join(data, "meta.json")))
summary = {"task": task, "budgets": [int(b) for b in budgets], "lrs": lrs, "batch_size": 16,
           "majority_class_accuracy": meta["majority_class_accuracy"], "runs": {}}
if task == "pos":
    summary["most_frequent_tag_accuracy"] = meta["most_frequent_tag_accuracy"]
for init in inits:
    r = {"lr_by_budget": {}, "validation_accuracy_by_lr": {}, "test_accuracy_by_budget": {}}
    for b in budgets:
        lr = open(os.path.join(runs, f"{init}-{b}.lr")).read().strip()
        prefix = f"{init}-{b}-"
        tried = sorted((d[len(prefix):] for d in os.listdir(runs)
                        if d.startswith(prefix) and os.path.exists(os.path.join(runs, d, "eval_results.json"))), key=float)
        r["lr_by_budget"][b] = lr
        r["validation_accuracy_by_lr"][b] = {
            l: json.load(open(os.path.join(runs, prefix + l, "eval_results.json")))["eval_accuracy"] for l in tried}
        r["test_accuracy_by_budget"][b] = json.load(open(os.path.join(runs, prefix + lr, "test_results.json")))["test_accuracy"]
    summary["runs"][init] = r
name = {"pos": "POS tagging (token accuracy)", "genre": "genre (accuracy)"}[task]
print(f"{name} on the {len(meta['eval_documents'])} held-out documents; learning rate chosen per start on the "
      f"validation split ({meta['validation_examples']} examples of {len(meta['validation_documents'])} training documents):")
for init in inits:
    r = summary["runs"][init]
    for b in budgets:
        sweep = ", ".join(f"{l} {100 * a:.1f}%" for l, a in r["validation_accuracy_by_lr"][b].items())
        print(f"  {init:<10} validation at {b} steps: {sweep} -> lr {r['lr_by_budget'][b]}")
head = "".join(f"  {b + ' steps':>10}" for b in budgets)
print(f"  {'':<28}{head}")
for init in inits:
    r = summary["runs"][init]
    label = f"{init}, fine-tuned" if init == "pretrained" else "random init, fine-tuned"
    print(f"  {label:<28}" + "".join(f"  {100 * r['test_accuracy_by_budget'][b]:>9.1f}%" for b in budgets))
    print(f"  {'  at lr':<28}" + "".join(f"  {r['lr_by_budget'][b]:>10}" for b in budgets))
if task == "pos":
    print(f"  {'most frequent tag per word':<28}  {100 * meta['most_frequent_tag_accuracy']:>9.1f}%")
print(f"  {'majority class':<28}  {100 * meta['majority_class_accuracy']:>9.1f}%")
tmp = os.path.join(os.path.dirname(runs), f".{task}-fair.json.tmp")
with open(tmp, "w") as f:
    json.dump(summary, f, indent=2)
os.replace(tmp, os.path.join(os.path.dirname(runs), f"{task}-fair.json"))
PY
