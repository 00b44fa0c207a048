#!/usr/bin/env python3
"""Independent masked-LM pretraining of the same model on the same prepared data, to tell a
bertlab bug from a recipe that cannot learn faster: the plain torch.nn BERT of make_golden.py
(Hugging Face names, tied decoder), torch.optim.AdamW, clip_grad_norm_, a one-cycle schedule,
no dropout, fp32, masked LM only, static masks as stored in the shards (read here with their
own reader, following docs/data.md "Shard format").

    /usr/bin/python3 tests/reference/pretrain_reference.py DATA_DIR CONFIG.json OUT.jsonl \
        [--steps N] [--batch B] [--lr PEAK] [--beta2 B2] [--eval-every K] [--threads T]

Writes one JSON line per evaluation (step, eval_mlm_accuracy, eval_mlm_loss, train accuracy
over the steps since the previous evaluation), comparable with bertlab's metrics.jsonl. The
evaluation set is the first --eval-seqs instances of the eval split in stored order, as bertlab
evaluates with --eval-batches EVAL_SEQS/BATCH.

    /usr/bin/python3 tests/reference/pretrain_reference.py --compare BERTLAB/metrics.jsonl OUT.jsonl

prints both held-out curves side by side (markdown) at the steps both evaluated.
"""

import argparse
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_golden as mg  # noqa: E402


def read_shard(path):
    data = open(path, "rb").read()
    assert data[:8] == b"BLSHARD\0", path
    seq, maxp = struct.unpack_from("<II", data, 16)
    n = struct.unpack_from("<Q", data, 32)[0]
    offs = np.frombuffer(data, dtype="<u8", count=n + 1, offset=64)
    ids = np.zeros((n, seq), dtype=np.int64)
    lens = np.zeros(n, dtype=np.int64)
    lab = np.full((n, seq), -100, dtype=np.int64)
    for i in range(n):
        o = 64 + int(offs[i])
        nt, la, _rn, _r, nm = struct.unpack_from("<HHBBH", data, o)
        o += 8
        ids[i, :nt] = np.frombuffer(data, dtype="<i4", count=nt, offset=o)
        o += 4 * nt
        pos = np.frombuffer(data, dtype="<u2", count=nm, offset=o)
        o += 2 * nm
        labels = np.frombuffer(data, dtype="<i4", count=nm, offset=o)
        lab[i, pos] = labels
        lens[i] = nt
    return ids, lens, lab


def load_split(d, split):
    meta = json.load(open(os.path.join(d, "meta.json")))
    parts = [read_shard(os.path.join(d, s)) for s in meta[split]["shards"]]
    return tuple(np.concatenate([p[k] for p in parts]) for k in range(3)), meta["vocab_size"]


def compare(bertlab_metrics, reference):
    ours = {m["step"]: m for m in map(json.loads, open(bertlab_metrics)) if "eval_mlm_accuracy" in m}
    ref = {m["step"]: m for m in map(json.loads, open(reference))}
    print("| step | bertlab MLM acc | PyTorch MLM acc | bertlab MLM loss | PyTorch MLM loss |")
    print("|---|---|---|---|---|")
    for step in sorted(set(ours) & set(ref)):
        a, b = ours[step], ref[step]
        print(f"| {step} | {a['eval_mlm_accuracy']:.3f} | {b['eval_mlm_accuracy']:.3f} | "
              f"{a['eval_mlm_loss']:.3f} | {b['eval_mlm_loss']:.3f} |")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--compare":
        return compare(sys.argv[2], sys.argv[3])
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("config")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--eval-seqs", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    (tr_ids, tr_len, tr_lab), vocab = load_split(a.data, "train")
    (ev_ids, ev_len, ev_lab), _ = load_split(a.data, "eval")
    c = json.load(open(a.config))
    c["vocab_size"] = vocab
    model = mg.BertForPreTraining(c)
    # Hugging Face's init: normal(0, std) weights, zero biases, LayerNorm 1/0, zero padding row.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            elif name.endswith(".weight"):
                p.normal_(0.0, c["initializer_range"])
            else:
                p.zero_()
        model.bert.embeddings.word_embeddings.weight[c["pad_token_id"]].zero_()
    decay = [p for n, p in model.named_parameters() if not mg.is_no_decay(n)]
    no_decay = [p for n, p in model.named_parameters() if mg.is_no_decay(n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, a.beta2), eps=1e-6)
    half = a.steps // 2
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / half if s + 1 <= half else max(0.0, (a.steps - s - 1) / (a.steps - half)))

    def forward(ids, lens, lab):
        ids, lab = torch.from_numpy(ids), torch.from_numpy(lab)
        mask = (torch.arange(ids.shape[1])[None, :] < torch.from_numpy(lens)[:, None]).long()
        h, _ = model.bert(ids, torch.zeros_like(ids), mask)
        sel = lab != -100
        logits = model.cls.predictions(h[sel])
        y = lab[sel]
        return F.cross_entropy(logits, y), (logits.argmax(-1) == y).sum().item(), y.numel()

    rng = np.random.default_rng(a.seed)
    order, at = rng.permutation(len(tr_ids)), 0
    out = open(a.out, "w")
    hits = total = 0
    for step in range(1, a.steps + 1):
        if at + a.batch > len(order):
            order, at = rng.permutation(len(tr_ids)), 0
        idx = order[at:at + a.batch]
        at += a.batch
        model.train()
        loss, h, n = forward(tr_ids[idx], tr_len[idx], tr_lab[idx])
        hits, total = hits + h, total + n
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % a.eval_every == 0 or step == a.steps:
            model.eval()
            eh = en = 0
            el = 0.0
            with torch.no_grad():
                for i in range(0, min(a.eval_seqs, len(ev_ids)), 32):
                    l, h, n = forward(ev_ids[i:i + 32], ev_len[i:i + 32], ev_lab[i:i + 32])
                    eh, en, el = eh + h, en + n, el + l.item() * n
            rec = {"step": step, "eval_mlm_accuracy": eh / en, "eval_mlm_loss": el / en,
                   "train_mlm_accuracy": hits / max(total, 1)}
            hits = total = 0
            out.write(json.dumps(rec) + "\n")
            out.flush()
            print(rec, flush=True)


if __name__ == "__main__":
    main()
