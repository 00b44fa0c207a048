#!/usr/bin/env python3
"""Loads a pretraining model directory written by `bertlab train` as a plain BERT, without
bertlab, and compares its encoder output with the one bertlab computed.

    /usr/bin/python3 tests/reference/check_plain_bert.py MODEL_DIR INPUT.json HIDDEN.safetensors

MODEL_DIR/config.json and model.safetensors are read into the plain torch.nn BertModel of
make_golden.py (post-LN, LN(x + G(x)) in every sub-layer, nothing else): every parameter must
be in the file with its shape. INPUT.json holds input_ids, token_type_ids and attention_mask
(lists of lists); HIDDEN.safetensors holds bertlab's last_hidden_state for them. Used by
tests/test_recipe.cpp: a model trained with `--residual-scale A` (LN(A x + G(x))) must be
written as the plain BERT it equals. Prints the largest absolute difference; exit status 1 when
it is above TOL (default 1e-4).
"""

import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_golden as mg  # noqa: E402


def fail(msg):
    print("check_plain_bert: FAIL: " + msg)
    sys.exit(1)


def main():
    model_dir, input_file, hidden_file = sys.argv[1], sys.argv[2], sys.argv[3]
    tol = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-4
    c = json.load(open(os.path.join(model_dir, "config.json")))
    state = mg.read_safetensors(os.path.join(model_dir, "model.safetensors"))
    bert = mg.BertModel(c)
    with torch.no_grad():
        for name, p in bert.named_parameters():
            key = "bert." + name
            if key not in state:
                fail(f"missing tensor {key}")
            if list(state[key].shape) != list(p.shape):
                fail(f"{key} has shape {list(state[key].shape)}, expected {list(p.shape)}")
            p.copy_(torch.from_numpy(state[key].copy()))
    bert.eval()
    inputs = json.load(open(input_file))
    ids = torch.tensor(inputs["input_ids"])
    with torch.no_grad():
        h, _ = bert(ids, torch.tensor(inputs["token_type_ids"]), torch.tensor(inputs["attention_mask"]))
    want = torch.from_numpy(mg.read_safetensors(hidden_file)["last_hidden_state"].copy())
    if list(want.shape) != list(h.shape):
        fail(f"last_hidden_state has shape {list(want.shape)}, the reference {list(h.shape)}")
    worst = float((h - want).abs().max())
    print(f"check_plain_bert: max abs difference {worst:.3g} over {h.numel()} values (tolerance {tol:g})")
    if not worst <= tol:
        fail(f"max abs difference {worst:.3g} above {tol:g}")
    print("check_plain_bert: OK")


if __name__ == "__main__":
    main()
