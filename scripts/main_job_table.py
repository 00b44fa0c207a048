#!/usr/bin/python3
"""The main job's closing table (scripts/demo.sh): held-out masked-LM accuracy beside its
yardsticks, then POS tagging and genre from the pretrained model and from random weights beside
their baselines, as scripts/finetune_fair.sh measured them (OUT/pos-fair.json, genre-fair.json).

    scripts/main_job_table.py OUT
"""
import json
import os
import sys


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "out"
    metrics = os.path.join(out, "bert-mini-brown", "metrics.jsonl")
    evals = [m for m in map(json.loads, open(metrics)) if "eval_mlm_accuracy" in m]
    if not evals:
        sys.exit(f"main_job_table.py: {metrics} has no evaluation line")
    last = evals[-1]
    print(f"main job on the held-out Brown documents (pretraining: {last['step']} steps of 8 sequences)")
    print(f"  {'masked LM, 15% masked':<34} accuracy {last['eval_mlm_accuracy']:.3f}   (yardsticks: most frequent "
          f"token {last['eval_most_frequent_accuracy']:.3f}", end="")
    if "eval_left_neighbour_accuracy" in last:
        print(f", left neighbour {last['eval_left_neighbour_accuracy']:.3f}, right "
              f"{last['eval_right_neighbour_accuracy']:.3f}, both {last['eval_both_neighbours_accuracy']:.3f})")
    else:
        print(")")
    curve = ", ".join(f"{e['eval_mlm_accuracy']:.3f}" for e in evals)
    print(f"  {'  curve at ' + ', '.join(str(e['step']) for e in evals):<34}")
    print(f"  {'':<34} {curve}")
    for task, name, baseline in (("pos", "POS tagging (token accuracy)", ("most_frequent_tag_accuracy", "most frequent tag per word")),
                                 ("genre", "genre (accuracy)", None)):
        path = os.path.join(out, f"{task}-fair.json")
        if not os.path.exists(path):
            continue
        s = json.load(open(path))
        budgets = [str(b) for b in s["budgets"]]
        print(f"  {name:<34}" + "".join(f"{b + ' steps':>12}" for b in budgets))
        for init in ("pretrained", "scratch"):
            if init not in s["runs"]:
                continue
            r = s["runs"][init]
            label = "pretrained" if init == "pretrained" else "random init"
            print(f"    {label:<32}" + "".join(f"{100 * r['test_accuracy_by_budget'][b]:>11.1f}%" for b in budgets))
            print(f"    {'  at lr':<32}" + "".join(f"{r['lr_by_budget'][b]:>12}" for b in budgets))
        if "pretrained" in s["runs"] and "scratch" in s["runs"]:
            gain = [100 * (s["runs"]["pretrained"]["test_accuracy_by_budget"][b] -
                           s["runs"]["scratch"]["test_accuracy_by_budget"][b]) for b in budgets]
            print(f"    {'pretrained - random init':<32}" + "".join(f"{g:>+11.1f} " for g in gain))
        if baseline:
            print(f"    {baseline[1]:<32}{100 * s[baseline[0]]:>11.1f}%")
        print(f"    {'majority class':<32}{100 * s['majority_class_accuracy']:>11.1f}%")


if __name__ == "__main__":
    main()
