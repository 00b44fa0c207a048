#!/usr/bin/env python3
"""A copy of a model directory in which the tensors whose names match a regular expression are
replaced by Hugging Face's initialisation (normal(0, initializer_range) weights, the padding row
of the word embeddings zero, zero biases, LayerNorm 1/0): to find which part of a pretrained
checkpoint helps or hurts fine-tuning.

    /usr/bin/python3 tests/reference/mix_checkpoint.py SRC_DIR DST_DIR REGEX [--invert] [--seed 7]

REGEX is matched (re.search) against the Hugging Face names; --invert re-initialises the
tensors that do NOT match. config.json, vocab.txt and tokenizer_config.json are copied.
Examples: 'word_embeddings' (pretrained encoder, fresh word embeddings); 'word_embeddings'
--invert (only the word embeddings pretrained).
"""

import argparse
import json
import os
import re
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_golden as mg  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("regex")
    ap.add_argument("--invert", action="store_true")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    c = json.load(open(os.path.join(a.src, "config.json")))
    gen = torch.Generator().manual_seed(a.seed)
    os.makedirs(a.dst, exist_ok=True)
    for f in ("config.json", "vocab.txt", "tokenizer_config.json"):
        if os.path.exists(os.path.join(a.src, f)):
            shutil.copy(os.path.join(a.src, f), a.dst)
    out, fresh = [], []
    for name, arr in mg.read_safetensors(os.path.join(a.src, "model.safetensors")).items():
        t = torch.from_numpy(arr.copy())
        if bool(re.search(a.regex, name)) != a.invert:
            fresh.append(name)
            if "LayerNorm" in name:
                t.fill_(1.0 if name.endswith("weight") else 0.0)
            elif name.endswith("weight"):
                t.normal_(0.0, c["initializer_range"], generator=gen)
                if "word_embeddings" in name:
                    t[c["pad_token_id"]].zero_()
            else:
                t.zero_()
        out.append((name, t))
    tmp = os.path.join(a.dst, "model.safetensors.tmp")
    mg.write_safetensors(tmp, out)
    os.replace(tmp, os.path.join(a.dst, "model.safetensors"))
    print(f"mix_checkpoint: {len(fresh)} of {len(out)} tensors re-initialised in {a.dst}")


if __name__ == "__main__":
    main()
