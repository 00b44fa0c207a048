#!/usr/bin/python3
"""PyTorch CPU baseline for `bertlab bench`: the same BERT (tests/reference/make_golden.py's
torch.nn model with Hugging Face names), the same shapes and the same work per step.

  infer: BertModel forward (encoder + pooler), like `bertlab bench --mode infer`
  train: forward, MLM head on the masked positions only + NSP, losses, backward, AdamW step

--precision bf16 runs the forward pass (and losses) under torch.autocast("cpu", bfloat16), the
mixed precision `bertlab --precision bf16` mirrors (bf16 GEMMs, f32 weights and optimizer).

Prints sequences/s (median, min, max over --runs after --warmup) and peak RSS.
Run with Debian's python3-torch: /usr/bin/python3 bench/torch_bert.py --config ... """
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "reference"))
from make_golden import BertForPreTraining  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--mode", choices=["infer", "train"], default="infer")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    c = json.load(open(a.config))
    model = BertForPreTraining(c)
    B, S, V = a.batch, a.seq, c["vocab_size"]
    P = (S * 15 + 99) // 100  # masked positions per sequence, as bertlab's default
    ids = torch.randint(0, V, (B, S))
    types = (torch.arange(S) >= S // 2).long().expand(B, S).contiguous()
    mask = torch.ones(B, S, dtype=torch.long)
    positions = torch.stack([torch.randperm(S - 1)[:P] + 1 for _ in range(B)])
    labels = torch.randint(0, V, (B, P))
    nsp_labels = torch.randint(0, 2, (B,))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, eps=1e-6, weight_decay=0.01)

    if a.precision == "bf16":
        # PyTorch 1.13's CPU autocast hands LayerNorm bf16 inputs with f32 weights, which it then
        # rejects; keep LayerNorm in f32 (as bertlab does: only GEMMs run in bf16).
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.register_forward_pre_hook(lambda mod, inp: tuple(x.float() for x in inp))

    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16")

    def step():
        if a.mode == "infer":
            with torch.inference_mode(), autocast():
                model.bert(ids, types, mask)
            return
        with autocast():
            h, pooled = model.bert(ids, types, mask)
            picked = torch.gather(h, 1, positions.unsqueeze(-1).expand(B, P, h.shape[-1]))
            mlm, nsp = model.cls(picked, pooled)
            loss = F.cross_entropy(mlm.reshape(-1, V), labels.reshape(-1)) + F.cross_entropy(nsp, nsp_labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    if a.mode == "infer":
        model.eval()
    for _ in range(a.warmup):
        step()
    times = []
    for _ in range(a.runs):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(f"torch {torch.__version__} {a.mode} {os.path.basename(a.config)} batch={B} seq={S} {a.precision} threads={a.threads}: "
          f"{B / med:.2f} sequences/s (median of {a.runs}; min {B / max(times):.2f}, max {B / min(times):.2f}); "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
