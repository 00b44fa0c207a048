#!/usr/bin/env python3
"""Loads a model directory written by `bertlab finetune` without bertlab and without
`transformers` (not packaged in Debian) and checks `bertlab predict`'s output against it.

    /usr/bin/python3 tests/reference/check_finetuned.py MODEL_DIR INPUT PREDICTIONS.jsonl MAX_LEN

What `transformers` would read is checked: config.json (architectures, num_labels, id2label,
label2id that invert each other), model.safetensors with BertForSequenceClassification or
BertForTokenClassification names and shapes, vocab.txt. The model is the plain torch.nn BERT of
make_golden.py with the head's math (classifier on the pooler output, or on every token); the
tokenizer is bert_tokenizer_reference.py (HF's algorithm). Each example's probabilities must
equal bertlab's within 1e-4 and its labels must be the argmax. Exit status 1 on a mismatch.
"""

import csv
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bert_tokenizer_reference as tr  # noqa: E402
import make_golden as mg  # noqa: E402


def fail(msg):
    print("check_finetuned: FAIL: " + msg)
    sys.exit(1)


def main():
    model_dir, input_file, predictions, max_len = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    c = json.load(open(os.path.join(model_dir, "config.json")))
    arch = c.get("architectures", [None])[0]
    if arch not in ("BertForSequenceClassification", "BertForTokenClassification"):
        fail(f"architectures is {c.get('architectures')}")
    id2label = {int(k): v for k, v in c["id2label"].items()}
    if c.get("num_labels") != len(id2label) or {v: k for k, v in id2label.items()} != c["label2id"]:
        fail("num_labels, id2label and label2id disagree")
    n = len(id2label)
    state = mg.read_safetensors(os.path.join(model_dir, "model.safetensors"))
    token_task = arch == "BertForTokenClassification"
    if token_task and any(k.startswith("bert.pooler.") for k in state):
        fail("a token-classification checkpoint holds a pooler")
    if list(state["classifier.weight"].shape) != [n, c["hidden_size"]]:
        fail(f"classifier.weight has shape {state['classifier.weight'].shape}")
    bert = mg.BertModel(c)
    with torch.no_grad():
        for name, p in bert.named_parameters():
            key = "bert." + name
            if key not in state:
                if token_task and name.startswith("pooler."):
                    continue
                fail(f"missing tensor {key}")
            p.copy_(torch.from_numpy(state[key].copy()))
    w = torch.from_numpy(state["classifier.weight"].copy())
    b = torch.from_numpy(state["classifier.bias"].copy())
    bert.eval()

    vocab_tokens = [line.rstrip("\n") for line in open(os.path.join(model_dir, "vocab.txt"), encoding="utf-8")]
    vocab = {t: i for i, t in enumerate(vocab_tokens)}
    tk = json.load(open(os.path.join(model_dir, "tokenizer_config.json"))) if os.path.exists(
        os.path.join(model_dir, "tokenizer_config.json")) else {}
    basic = tr.BasicTokenizer(tk.get("do_lower_case", True), tk.get("strip_accents", None))

    def run(tokens, types):
        ids = torch.tensor([[vocab[t] for t in tokens]])
        with torch.no_grad():
            h, pooled = bert(ids, torch.tensor([types]), torch.ones_like(ids))
            x = h[0] if token_task else pooled[0]
            return torch.softmax(x @ w.T + b, dim=-1)

    rows = [json.loads(line) for line in open(predictions, encoding="utf-8")]
    worst = 0.0
    if token_task:
        sentences, cur = [], []
        for line in open(input_file, encoding="utf-8"):
            line = line.rstrip("\n")
            if not line.strip():
                if cur:
                    sentences.append(cur)
                cur = []
            else:
                cur.append(line.split("\t")[0])
        if cur:
            sentences.append(cur)
        if len(sentences) != len(rows):
            fail(f"{len(rows)} predictions for {len(sentences)} sentences")
        for words, row in zip(sentences, rows):
            tokens, first = ["[CLS]"], []
            for wi, word in enumerate(words):
                pieces = tr.tokenize(word, vocab, basic)
                for k, piece in enumerate(pieces):
                    if len(tokens) + 1 >= max_len:
                        break
                    if k == 0:
                        first.append((wi, len(tokens)))
                    tokens.append(piece)
            tokens.append("[SEP]")
            probs = run(tokens, [0] * len(tokens))
            for wi, pos in first:
                p = probs[pos]
                best = int(torch.argmax(p))
                if row["labels"][wi] != id2label[best]:
                    fail(f"word {wi} of {words}: bertlab says {row['labels'][wi]}, reference {id2label[best]}")
                worst = max(worst, abs(float(p[best]) - row["probabilities"][wi]))
    else:
        with open(input_file, newline="", encoding="utf-8") as f:
            examples = list(csv.DictReader(f))
        if len(examples) != len(rows):
            fail(f"{len(rows)} predictions for {len(examples)} examples")
        for ex, row in zip(examples, rows):
            tokens, types, _ = tr.encode(ex["text"], ex.get("text_pair"), vocab, basic, None)
            if len(tokens) > max_len:
                tokens, types, _ = tr.encode(ex["text"], ex.get("text_pair"), vocab, basic, max_len)
            probs = run(tokens, types)
            best = int(torch.argmax(probs))
            if row["label"] != id2label[best]:
                fail(f"{ex['text']!r}: bertlab says {row['label']}, reference {id2label[best]}")
            for i in range(n):
                worst = max(worst, abs(float(probs[i]) - row["probabilities"][id2label[i]]))
    if worst > 1e-4:
        fail(f"probabilities differ by up to {worst:.2e}")
    print(f"check_finetuned: OK: {arch}, {n} labels, {len(rows)} examples, largest probability difference {worst:.1e}")


if __name__ == "__main__":
    main()
