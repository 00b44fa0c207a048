#!/usr/bin/env python3
"""The sampled core walk against the exact one (scripts/hwmodel_sampling_check.sh writes the CSVs).

Usage: hwmodel_sampling_check.py EXACT.csv SAMPLED.csv [LABEL]

Both are `bertlab estimate --csv` of one graph over the same configurations (kernel x cores x
arrangement), one with "core": {"walk": "exact"}, one with "sampled". Prints, per metric, the worst
per-node relative error |sampled - exact| / exact (the node, configuration and both values), and
the worst relative error of the whole-graph BWMA-over-RWMA speedup per (kernel, cores). Exit
status 0; the caller judges the numbers against its targets.
"""
import csv
import sys
from collections import defaultdict

METRICS = ["cycles", "instructions", "l1_misses", "llc_misses", "tlb_misses", "dram_bytes"]


def load(path):
    rows = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            rows[(r["kernel"], r["cores"], r["arrangement"], r["node"])] = r
    return rows


def rel(s, e):
    if e == 0:
        return 0.0 if s == 0 else float("inf")
    return abs(s - e) / abs(e)


def main():
    exact, sampled = load(sys.argv[1]), load(sys.argv[2])
    label = sys.argv[3] if len(sys.argv) > 3 else sys.argv[1]
    if exact.keys() != sampled.keys():
        sys.exit(f"{label}: the two CSVs hold different nodes or configurations")
    print(f"## {label}: {len(exact)} node estimates")
    print("| metric | worst relative error | node | kernel | cores | arrangement | exact | sampled |")
    print("|---|---|---|---|---|---|---|---|")
    for m in METRICS:
        worst = (0.0, None)
        for k, e in exact.items():
            x = rel(float(sampled[k][m]), float(e[m]))
            if x > worst[0] or worst[1] is None:
                worst = (x, k)
        x, k = worst
        print(f"| {m} | {100 * x:.3f}% | {k[3]} | {k[0]} | {k[1]} | {k[2]} | {exact[k][m]} | {sampled[k][m]} |")
    time = defaultdict(float)  # (walk, kernel, cores, arrangement) -> seconds of the graph
    for walk, rows in (("exact", exact), ("sampled", sampled)):
        for (S, P, arr, _), r in rows.items():
            time[(walk, S, P, arr)] += float(r["seconds"])
    print()
    print("| kernel | cores | speedup exact | speedup sampled | relative error |")
    print("|---|---|---|---|---|")
    worst = 0.0
    for S, P in sorted({(k[0], k[1]) for k in exact}, key=lambda t: (int(t[0]), int(t[1]))):
        if ("exact", S, P, "rwma") not in time or ("exact", S, P, "bwma") not in time:
            continue
        e = time[("exact", S, P, "rwma")] / time[("exact", S, P, "bwma")]
        s = time[("sampled", S, P, "rwma")] / time[("sampled", S, P, "bwma")]
        worst = max(worst, rel(s, e))
        print(f"| {S} | {P} | {e:.4f}x | {s:.4f}x | {100 * rel(s, e):.3f}% |")
    print(f"\nworst whole-graph speedup error: {100 * worst:.3f}%")


if __name__ == "__main__":
    main()
