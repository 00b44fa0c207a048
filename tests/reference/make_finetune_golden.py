#!/usr/bin/env python3
"""Golden fixtures for the fine-tuning heads (bertlab reference).

Run with Debian's interpreter after make_golden.py (it reuses its tiny model):

    /usr/bin/python3 tests/reference/make_finetune_golden.py

Hugging Face's BertForSequenceClassification (dropout, then `classifier` on the pooler
output) and BertForTokenClassification (no pooler, `classifier` on every token), written
with the plain torch.nn pieces of make_golden.py (no `transformers`), on the tiny model of
tiny_bert/ and the batch of tiny_bert/input.json. Dropout is not applied. Writes
tiny_bert/finetune.safetensors (about 40 KB):

  {seq,tok}.classifier.weight / .bias   the heads' initial weights (normal(0, 0.02), bias 0)
  {seq,tok}.logits                      [3, 3] and [3, 13, 4]
  {seq,tok}.grad.<param>                d(loss)/d(param) for a few parameters
and tiny_bert/finetune.json: the labels (-100: ignored) and the two losses (CrossEntropyLoss,
mean over labelled sequences / tokens).
"""

import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_golden as mg  # noqa: E402

OUT = os.path.join(HERE, "tiny_bert")
SEQ_LABELS = [2, 0, 1]
NUM_SEQ_LABELS = 3
NUM_TOKEN_LABELS = 4
GRADS = [
    "bert.embeddings.LayerNorm.weight",
    "bert.embeddings.position_embeddings.weight",
    "bert.encoder.layer.0.attention.self.query.weight",
    "bert.encoder.layer.1.attention.self.value.bias",
    "bert.encoder.layer.1.output.dense.weight",
    "bert.pooler.dense.weight",
    "classifier.weight",
    "classifier.bias",
]


def token_labels(batch, gen):
    """-100 on [CLS], [SEP], padding and (as for continuation sub-words) every third token."""
    ids = batch["input_ids"]
    labels = torch.randint(0, NUM_TOKEN_LABELS, ids.shape, generator=gen)
    ignore = (ids == mg.CLS_ID) | (ids == mg.SEP_ID) | (batch["attention_mask"] == 0)
    ignore |= (torch.arange(ids.shape[1])[None, :] % 3 == 2)
    return labels.masked_fill(ignore, -100)


def load_bert(c):
    bert = mg.BertModel(c)
    state = mg.read_safetensors(os.path.join(OUT, "model.safetensors"))
    own = dict(bert.named_parameters())
    with torch.no_grad():
        for name, p in own.items():
            p.copy_(torch.from_numpy(state["bert." + name].copy()))
    return bert


def run(kind, c, batch, labels, gen):
    bert = load_bert(c)
    n = NUM_SEQ_LABELS if kind == "seq" else NUM_TOKEN_LABELS
    clf = nn.Linear(c["hidden_size"], n)
    with torch.no_grad():
        clf.weight.normal_(0.0, c["initializer_range"], generator=gen)
        clf.bias.zero_()
    h, pooled = bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    logits = clf(pooled if kind == "seq" else h)
    loss = F.cross_entropy(logits.reshape(-1, n), labels.reshape(-1), ignore_index=-100)
    loss.backward()
    params = {"bert." + k: p for k, p in bert.named_parameters()}
    params.update({"classifier." + k: p for k, p in clf.named_parameters()})
    out = [(f"{kind}.classifier.weight", clf.weight), (f"{kind}.classifier.bias", clf.bias),
           (f"{kind}.logits", logits)]
    for name in GRADS:
        if kind == "tok" and name.startswith("bert.pooler."):
            continue  # BertForTokenClassification has no pooler
        out.append((f"{kind}.grad.{name}", params[name].grad))
    return out, float(loss)


def main():
    torch.manual_seed(mg.SEED)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    c = json.load(open(os.path.join(OUT, "config.json")))
    raw = json.load(open(os.path.join(OUT, "input.json")))
    batch = {k: torch.tensor(v, dtype=torch.long) for k, v in raw.items()}
    gen = torch.Generator().manual_seed(4321)
    tok_labels = token_labels(batch, gen)
    seq_out, seq_loss = run("seq", c, batch, torch.tensor(SEQ_LABELS), gen)
    tok_out, tok_loss = run("tok", c, batch, tok_labels, gen)
    mg.write_safetensors(os.path.join(OUT, "finetune.safetensors"), seq_out + tok_out)
    mg.write_json(os.path.join(OUT, "finetune.json"), {
        "seq_labels": SEQ_LABELS, "num_seq_labels": NUM_SEQ_LABELS, "seq_loss": seq_loss,
        "token_labels": tok_labels.tolist(), "num_token_labels": NUM_TOKEN_LABELS, "token_loss": tok_loss,
    }, rows=True)
    print(f"seq loss {seq_loss:.6f}, token loss {tok_loss:.6f} "
          f"({int((tok_labels != -100).sum())} labelled tokens)")


if __name__ == "__main__":
    main()
