#!/usr/bin/env python3
"""How far a lookup of nearby tokens gets on the held-out masked-LM task, as a yardstick for
the pretraining curve (docs/training.md, "A higher masking rate").

    /usr/bin/python3 tests/reference/mlm_context_baseline.py DATA_DIR [--json]

Counts, on the training split's text (the stored labels put back at the masked positions),
which token follows each token, which precedes it, and which stands between each pair of
tokens. Then predicts every masked position of the eval split, whose neighbours may themselves
be masked as in the model's input:
  - most frequent token overall (the curve's "most frequent token");
  - from the left neighbour alone, from the right neighbour alone;
  - from both neighbours (falling back to the left one for an unseen pair).
Prints the accuracy of each; with --json, one JSON object of the counts instead ("masked" and
the hits of each: "most_frequent", "left", "right", "both"), which the C++ yardsticks of `bertlab
train`'s evaluation are tested against (tests/test_plateau_diagnostics.cpp).
"""

import json
import os
import sys
from collections import Counter, defaultdict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pretrain_reference as pr  # noqa: E402


def main():
    as_json = sys.argv[2:] == ["--json"]
    if len(sys.argv) != 2 and not (len(sys.argv) == 3 and as_json):
        sys.exit(__doc__)
    (tr_ids, tr_len, tr_lab), _ = pr.load_split(sys.argv[1], "train")
    (ev_ids, ev_len, ev_lab), _ = pr.load_split(sys.argv[1], "eval")
    text = np.where(tr_lab != -100, tr_lab, tr_ids)
    unigram = Counter()
    after, before, between = defaultdict(Counter), defaultdict(Counter), defaultdict(Counter)
    for row, n in zip(text, tr_len):
        s = row[:n].tolist()
        unigram.update(s)
        for i in range(1, len(s) - 1):
            after[s[i - 1]][s[i]] += 1
            before[s[i + 1]][s[i]] += 1
            between[(s[i - 1], s[i + 1])][s[i]] += 1
    top = unigram.most_common(1)[0][0]

    def best(table, key):
        c = table.get(key)
        return c.most_common(1)[0][0] if c else None

    hits = Counter()
    total = 0
    for row, n, lab in zip(ev_ids, ev_len, ev_lab):
        s = row[:n].tolist()
        for i in np.nonzero(lab[:n] != -100)[0].tolist():
            y = int(lab[i])
            left = s[i - 1] if i > 0 else None
            right = s[i + 1] if i + 1 < n else None
            total += 1
            hits["most frequent token"] += top == y
            l = best(after, left)
            hits["left neighbour"] += (l if l is not None else top) == y
            r = best(before, right)
            hits["right neighbour"] += (r if r is not None else top) == y
            both = best(between, (left, right))
            hits["both neighbours"] += (both if both is not None else l if l is not None else top) == y
    if as_json:
        print(json.dumps({"masked": total, "most_frequent": hits["most frequent token"], "left": hits["left neighbour"],
                          "right": hits["right neighbour"], "both": hits["both neighbours"]}))
        return
    print(f"{total} masked positions in the eval split of {sys.argv[1]}; accuracy of the prediction from:")
    for k in ("most frequent token", "left neighbour", "right neighbour", "both neighbours"):
        print(f"  {k:<20} {hits[k] / total:.3f}")


if __name__ == "__main__":
    main()
