#!/usr/bin/env python3
"""Generate PyTorch golden fixtures for a tiny BERT (bertlab reference).

Run with Debian's interpreter (python3-torch 1.13, python3-numpy):

    /usr/bin/python3 tests/reference/make_golden.py

Writes tests/reference/tiny_bert/{config.json, model.safetensors, input.json,
expected.safetensors, train_input.json, labels.json, train_expected.json,
gradients.safetensors}.  See tests/reference/README.md for the conventions.

The model is built here from plain torch.nn pieces (no `transformers`), with the
Hugging Face BertForPreTraining parameter names, so it is an independent
reference.  Dropout is never applied.
"""

import copy
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "tiny_bert")

SEED = 1234
CONFIG = {
    "architectures": ["BertForPreTraining"],
    "model_type": "bert",
    "vocab_size": 211,
    "hidden_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 3,
    "intermediate_size": 80,
    "max_position_embeddings": 40,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "initializer_range": 0.02,
    "pad_token_id": 0,
    "position_embedding_type": "absolute",
    "torch_dtype": "float32",
}

# Batch layout.
BATCH = 3
SEQ = 13
LENGTHS = [13, 9, 5]
PAD_ID, CLS_ID, SEP_ID, MASK_ID = 0, 2, 3, 4
FIRST_REGULAR_ID = 5
NSP_LABELS = [0, 1, 0]          # fixed so both classes occur
MLM_FRACTION = 0.15
MLM_MIN_PER_SEQ = 2
IGNORE_INDEX = -100

# Optimiser hyperparameters (shared by AdamW and LAMB).
OPT = {
    "lr": 1e-3,
    "lr_schedule": "constant",
    "betas": [0.9, 0.999],
    "eps": 1e-6,
    "weight_decay": 0.01,
    "no_decay_name_substrings": ["bias", "LayerNorm"],
    "max_grad_norm": 1.0,
    "clip": "global L2 norm over all parameters (tied embedding counted once); "
            "coef = max_grad_norm / (total_norm + 1e-6); if coef < 1: g *= coef "
            "(torch.nn.utils.clip_grad_norm_)",
    "steps": 5,
    "bias_correction": True,
    "adamw": "p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; "
             "p -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps)  (torch.optim.AdamW)",
    "lamb": "m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; u = (m/(1-b1^t)) / "
            "(sqrt(v/(1-b2^t)) + eps) + wd*p; trust = ||p||/||u|| if ||p||>0 and "
            "||u||>0 else 1 (per tensor, applied to every tensor incl. no-decay ones); "
            "p -= lr*trust*u",
}


# --------------------------------------------------------------------------
# Model (HF BertForPreTraining layout and names)
# --------------------------------------------------------------------------

def gelu(x):
    """Exact (erf) GELU, HF hidden_act == "gelu"."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


class BertEmbeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.word_embeddings = nn.Embedding(c["vocab_size"], c["hidden_size"],
                                            padding_idx=c["pad_token_id"])
        self.position_embeddings = nn.Embedding(c["max_position_embeddings"], c["hidden_size"])
        self.token_type_embeddings = nn.Embedding(c["type_vocab_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, input_ids, token_type_ids):
        s = input_ids.shape[1]
        pos = torch.arange(s, device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(pos)[None, :, :]
        return self.LayerNorm(x)


class BertSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden_size"]
        self.nh = c["num_attention_heads"]
        self.hd = h // self.nh
        self.query = nn.Linear(h, h)
        self.key = nn.Linear(h, h)
        self.value = nn.Linear(h, h)

    def split(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.nh, self.hd).permute(0, 2, 1, 3)  # [B, nh, S, hd]

    def forward(self, x, ext_mask):
        q = self.split(self.query(x))
        k = self.split(self.key(x))
        v = self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.hd)
        scores = scores + ext_mask
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        b, s = ctx.shape[:2]
        return ctx.view(b, s, self.nh * self.hd)


class BertSelfOutput(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, h, residual):
        return self.LayerNorm(self.dense(h) + residual)


class BertAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self = BertSelfAttention(c)
        self.output = BertSelfOutput(c)

    def forward(self, x, ext_mask):
        return self.output(self.self(x, ext_mask), x)


class BertIntermediate(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["intermediate_size"])

    def forward(self, x):
        return gelu(self.dense(x))


class BertOutput(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["intermediate_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, h, residual):
        return self.LayerNorm(self.dense(h) + residual)


class BertLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = BertAttention(c)
        self.intermediate = BertIntermediate(c)
        self.output = BertOutput(c)

    def forward(self, x, ext_mask):
        a = self.attention(x, ext_mask)
        return self.output(self.intermediate(a), a)


class BertEncoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(c) for _ in range(c["num_hidden_layers"])])

    def forward(self, x, ext_mask):
        for l in self.layer:
            x = l(x, ext_mask)
        return x


class BertPooler(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["hidden_size"])

    def forward(self, h):
        return torch.tanh(self.dense(h[:, 0]))


class BertModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embeddings = BertEmbeddings(c)
        self.encoder = BertEncoder(c)
        self.pooler = BertPooler(c)

    def forward(self, input_ids, token_type_ids, attention_mask):
        x = self.embeddings(input_ids, token_type_ids)
        dt = x.dtype
        # HF: extended mask = (1 - mask) * finfo(dtype).min, added to scores/sqrt(hd)
        ext = (1.0 - attention_mask[:, None, None, :].to(dt)) * torch.finfo(dt).min
        h = self.encoder(x, ext)
        return h, self.pooler(h)


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, h):
        return self.LayerNorm(gelu(self.dense(h)))


class BertLMPredictionHead(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transform = BertPredictionHeadTransform(c)
        self.decoder = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        self.bias = nn.Parameter(torch.zeros(c["vocab_size"]))

    def forward(self, h):
        return self.decoder(self.transform(h)) + self.bias


class BertPreTrainingHeads(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.predictions = BertLMPredictionHead(c)
        self.seq_relationship = nn.Linear(c["hidden_size"], 2)

    def forward(self, h, pooled):
        return self.predictions(h), self.seq_relationship(pooled)


class BertForPreTraining(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.bert = BertModel(c)
        self.cls = BertPreTrainingHeads(c)
        # Tie decoder to word embeddings: ONE parameter.
        self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight

    def forward(self, input_ids, token_type_ids, attention_mask):
        h, pooled = self.bert(input_ids, token_type_ids, attention_mask)
        mlm, nsp = self.cls(h, pooled)
        return h, pooled, mlm, nsp


def init_weights(model, c):
    """normal(0, 0.02) for linear/embedding weights (padding row zeroed, as HF),
    then LayerNorm gamma = 1 + 0.1*randn, every bias (linear, LayerNorm,
    cls.predictions.bias) = 0.1*randn."""
    std = c["initializer_range"]
    with torch.no_grad():
        named = list(model.named_parameters())  # tied weight appears once
        for name, p in named:
            if name.endswith(".weight") and "LayerNorm" not in name:
                p.normal_(0.0, std)
        model.bert.embeddings.word_embeddings.weight[c["pad_token_id"]].zero_()
        for name, p in named:
            if "LayerNorm" in name and name.endswith(".weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))


def mlm_loss_fn(mlm_logits, nsp_logits, labels, nsp_labels):
    v = mlm_logits.shape[-1]
    mlm = F.cross_entropy(mlm_logits.reshape(-1, v), labels.reshape(-1), ignore_index=IGNORE_INDEX)
    nsp = F.cross_entropy(nsp_logits, nsp_labels)
    return mlm, nsp


def compute_loss(model, batch, labels, nsp_labels):
    _, _, mlm, nsp = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    lm, ln = mlm_loss_fn(mlm, nsp, labels, nsp_labels)
    return lm + ln, lm, ln, mlm


# --------------------------------------------------------------------------
# Export-name helpers
# --------------------------------------------------------------------------

TIED_DECODER = "cls.predictions.decoder.weight"
WORD_EMB = "bert.embeddings.word_embeddings.weight"


def export_state(model):
    """All parameters with HF names, including the tied decoder (same values)."""
    res = []
    for name, p in model.named_parameters():
        res.append((name, p.detach()))
        # the tied decoder goes right after cls.predictions.bias
        if name == "cls.predictions.bias":
            res.append((TIED_DECODER, model.cls.predictions.decoder.weight.detach()))
    names = [n for n, _ in res]
    assert TIED_DECODER in names and len(set(names)) == len(names)
    return res


def is_no_decay(name):
    return any(s in name for s in OPT["no_decay_name_substrings"])


# --------------------------------------------------------------------------
# safetensors writer / reader (no safetensors package)
# --------------------------------------------------------------------------

def write_safetensors(path, tensors):
    header = {}
    blobs = []
    off = 0
    for name, t in tensors:
        a = np.ascontiguousarray(t.detach().cpu().to(torch.float32).numpy()).astype("<f4")
        b = a.tobytes(order="C")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((-len(hj)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    expect = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32"
        b, e = info["data_offsets"]
        assert b == expect, "tensors not contiguous"
        expect = e
        out[name] = np.frombuffer(data[base + b:base + e], dtype="<f4").reshape(info["shape"])
    assert base + expect == len(data)
    return out


def write_json(path, obj, rows=False):
    if rows:
        # one inner list per line for readability
        parts = []
        for k, v in obj.items():
            if isinstance(v, list) and v and isinstance(v[0], list):
                inner = ",\n".join("    " + json.dumps(r) for r in v)
                parts.append("  %s: [\n%s\n  ]" % (json.dumps(k), inner))
            else:
                parts.append("  %s: %s" % (json.dumps(k), json.dumps(v)))
        text = "{\n" + ",\n".join(parts) + "\n}\n"
    else:
        text = json.dumps(obj, indent=2) + "\n"
    with open(path, "w") as f:
        f.write(text)


# --------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------

def make_batch(c):
    ids = torch.full((BATCH, SEQ), PAD_ID, dtype=torch.long)
    tt = torch.zeros((BATCH, SEQ), dtype=torch.long)
    am = torch.zeros((BATCH, SEQ), dtype=torch.long)
    regular = []  # per sequence: list of non-special real positions
    for b, L in enumerate(LENGTHS):
        la = (L - 3) // 2
        lb = L - 3 - la
        seq = [CLS_ID]
        seq += torch.randint(FIRST_REGULAR_ID, c["vocab_size"], (la,)).tolist()
        seq += [SEP_ID]
        seq += torch.randint(FIRST_REGULAR_ID, c["vocab_size"], (lb,)).tolist()
        seq += [SEP_ID]
        assert len(seq) == L
        ids[b, :L] = torch.tensor(seq)
        tt[b, la + 2:L] = 1          # second segment incl. its final [SEP]
        am[b, :L] = 1
        regular.append(list(range(1, 1 + la)) + list(range(la + 2, la + 2 + lb)))
    return {"input_ids": ids, "token_type_ids": tt, "attention_mask": am}, regular


def make_mlm(batch, regular):
    labels = torch.full((BATCH, SEQ), IGNORE_INDEX, dtype=torch.long)
    train_ids = batch["input_ids"].clone()
    for b, pos in enumerate(regular):
        n = max(MLM_MIN_PER_SEQ, math.ceil(MLM_FRACTION * len(pos)))
        n = min(n, len(pos))
        perm = torch.randperm(len(pos))[:n].tolist()
        chosen = sorted(pos[i] for i in perm)
        for p in chosen:
            labels[b, p] = batch["input_ids"][b, p]
            train_ids[b, p] = MASK_ID
    tb = {"input_ids": train_ids, "token_type_ids": batch["token_type_ids"].clone(),
          "attention_mask": batch["attention_mask"].clone()}
    return tb, labels


# --------------------------------------------------------------------------
# Optimisers (by hand)
# --------------------------------------------------------------------------

def clip_grads(grads, max_norm):
    total = torch.norm(torch.stack([g.norm(2) for g in grads]), 2)
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        grads = [g * coef for g in grads]
    return grads, float(total)


def run_optimizer(model0, kind, batch, labels, nsp_labels):
    model = copy.deepcopy(model0)   # deepcopy keeps the tie
    named = list(model.named_parameters())
    params = [p for _, p in named]
    assert sum(1 for p in params if p is model.cls.predictions.decoder.weight) == 1
    lr, (b1, b2), eps, wd = OPT["lr"], OPT["betas"], OPT["eps"], OPT["weight_decay"]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    losses, gnorms = [], []
    for t in range(1, OPT["steps"] + 1):
        loss, _, _, _ = compute_loss(model, batch, labels, nsp_labels)
        losses.append(float(loss))
        grads = torch.autograd.grad(loss, params)
        grads, gn = clip_grads(grads, OPT["max_grad_norm"])
        gnorms.append(gn)
        bc1 = 1.0 - b1 ** t
        bc2 = 1.0 - b2 ** t
        with torch.no_grad():
            for i, (name, p) in enumerate(named):
                g = grads[i]
                d = 0.0 if is_no_decay(name) else wd
                m[i].mul_(b1).add_(g, alpha=1.0 - b1)
                v[i].mul_(b2).addcmul_(g, g, value=1.0 - b2)
                if kind == "adamw":
                    p.mul_(1.0 - lr * d)
                    denom = (v[i].sqrt() / math.sqrt(bc2)).add_(eps)
                    p.addcdiv_(m[i], denom, value=-lr / bc1)
                elif kind == "lamb":
                    u = (m[i] / bc1) / ((v[i] / bc2).sqrt() + eps)
                    if d != 0.0:
                        u = u + d * p
                    pn = float(p.norm(2))
                    un = float(u.norm(2))
                    trust = pn / un if (pn > 0.0 and un > 0.0) else 1.0
                    p.add_(u, alpha=-lr * trust)
                else:
                    raise ValueError(kind)
    with torch.no_grad():
        loss, _, _, _ = compute_loss(model, batch, labels, nsp_labels)
    losses.append(float(loss))
    return model, losses, gnorms


def run_torch_adamw(model0, batch, labels, nsp_labels):
    model = copy.deepcopy(model0)
    named = list(model.named_parameters())
    groups = [
        {"params": [p for n, p in named if not is_no_decay(n)], "weight_decay": OPT["weight_decay"]},
        {"params": [p for n, p in named if is_no_decay(n)], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=OPT["lr"], betas=tuple(OPT["betas"]), eps=OPT["eps"])
    losses = []
    for _ in range(OPT["steps"]):
        opt.zero_grad()
        loss, _, _, _ = compute_loss(model, batch, labels, nsp_labels)
        losses.append(float(loss))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), OPT["max_grad_norm"])
        opt.step()
    with torch.no_grad():
        loss, _, _, _ = compute_loss(model, batch, labels, nsp_labels)
    losses.append(float(loss))
    return model, losses


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------

def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT, exist_ok=True)
    c = CONFIG

    model = BertForPreTraining(c)
    init_weights(model, c)
    model.eval()  # no dropout modules exist anyway

    batch, regular = make_batch(c)
    train_batch, labels = make_mlm(batch, regular)
    nsp_labels = torch.tensor(NSP_LABELS, dtype=torch.long)

    # ---- config, weights, inputs
    write_json(os.path.join(OUT, "config.json"), c)
    state = export_state(model)
    write_safetensors(os.path.join(OUT, "model.safetensors"), state)
    as_lists = lambda bt: {k: bt[k].tolist() for k in ("input_ids", "token_type_ids", "attention_mask")}
    write_json(os.path.join(OUT, "input.json"), as_lists(batch), rows=True)
    write_json(os.path.join(OUT, "train_input.json"), as_lists(train_batch), rows=True)
    write_json(os.path.join(OUT, "labels.json"),
               {"masked_lm_labels": labels.tolist(), "next_sentence_label": NSP_LABELS}, rows=True)

    # ---- inference goldens
    with torch.no_grad():
        h, pooled, mlm, nsp = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    write_safetensors(os.path.join(OUT, "expected.safetensors"), [
        ("last_hidden_state", h), ("pooler_output", pooled),
        ("mlm_logits", mlm), ("nsp_logits", nsp)])

    # ---- training goldens: loss + gradients
    named = list(model.named_parameters())
    params = [p for _, p in named]
    loss, lm, ln, mlm_t = compute_loss(model, train_batch, labels, nsp_labels)
    grads = torch.autograd.grad(loss, params)
    sel = labels != IGNORE_INDEX
    acc = float((mlm_t.argmax(-1)[sel] == labels[sel]).float().mean())
    gnorm0 = float(torch.norm(torch.stack([g.norm(2) for g in grads]), 2))
    write_safetensors(os.path.join(OUT, "gradients.safetensors"),
                      [(n, g) for (n, _), g in zip(named, grads)])
    assert TIED_DECODER not in [n for n, _ in named]

    # ---- optimiser runs
    m_adamw, adamw_losses, adamw_gn = run_optimizer(model, "adamw", train_batch, labels, nsp_labels)
    m_lamb, lamb_losses, lamb_gn = run_optimizer(model, "lamb", train_batch, labels, nsp_labels)
    m_tadamw, tadamw_losses = run_torch_adamw(model, train_batch, labels, nsp_labels)

    pnorms = lambda mdl: {n: float(p.detach().norm(2)) for n, p in mdl.named_parameters()}
    train_expected = {
        "mlm_loss": float(lm),
        "nsp_loss": float(ln),
        "total_loss": float(loss),
        "mlm_accuracy": acc,
        "num_masked": int(sel.sum()),
        "grad_global_norm": gnorm0,
        "adamw_losses": adamw_losses,
        "lamb_losses": lamb_losses,
        "adamw_grad_norms_preclip": adamw_gn,
        "lamb_grad_norms_preclip": lamb_gn,
        "adamw_final_param_norms": pnorms(m_adamw),
        "lamb_final_param_norms": pnorms(m_lamb),
        "optimizer_config": OPT,
    }
    write_json(os.path.join(OUT, "train_expected.json"), train_expected)

    # ---------------------------------------------------------------- checks
    print("masked positions per seq:", [int(r.sum()) for r in sel])
    print("mlm_loss %.7f  nsp_loss %.7f  total %.7f  mlm_acc %.4f  |g| %.6f"
          % (float(lm), float(ln), float(loss), acc, gnorm0))
    print("adamw losses:", ["%.7f" % x for x in adamw_losses])
    print("lamb  losses:", ["%.7f" % x for x in lamb_losses])
    print("adamw grad norms (pre-clip):", ["%.5f" % x for x in adamw_gn])
    print("lamb  grad norms (pre-clip):", ["%.5f" % x for x in lamb_gn])

    # hand AdamW vs torch.optim.AdamW
    dmax = max(float((a - b).abs().max()) for a, b in zip(m_adamw.parameters(), m_tadamw.parameters()))
    lmax = max(abs(a - b) for a, b in zip(adamw_losses, tadamw_losses))
    print("AdamW hand vs torch.optim.AdamW: max |dparam| %.3e, max |dloss| %.3e" % (dmax, lmax))
    assert dmax < 1e-6 and lmax < 1e-6

    # float64 clone: autograd vs central finite difference, and f32-vs-f64 grads
    md = copy.deepcopy(model).double()
    assert md.cls.predictions.decoder.weight is md.bert.embeddings.word_embeddings.weight
    named_d = list(md.named_parameters())
    loss_d, _, _, _ = compute_loss(md, train_batch, labels, nsp_labels)
    grads_d = torch.autograd.grad(loss_d, [p for _, p in named_d])
    gd = dict(zip([n for n, _ in named_d], grads_d))
    # attention.self.key.bias has an exactly-zero true gradient (softmax is
    # invariant to a per-query constant); in float32 it is rounding noise.
    worst, zero_true = 0.0, []
    for (n, _), g, gdd in zip(named, grads, grads_d):
        if n.endswith("attention.self.key.bias"):
            zero_true.append("%s |g32|=%.1e |g64|=%.1e" % (n, float(g.norm()), float(gdd.norm())))
            assert float(g.norm()) < 1e-9
            continue
        worst = max(worst, float((g.double() - gdd).norm() / gdd.norm()))
    print("float32 vs float64 gradients: worst per-tensor relative L2 error %.3e" % worst)
    for z in zero_true:
        print("  (true gradient 0)", z)
    assert worst < 1e-5
    print("float32 vs float64 total loss: %.3e" % abs(float(loss) - float(loss_d)))
    first_masked = labels[sel][0].item()
    checks = [
        ("bert.encoder.layer.0.attention.self.query.weight", None),
        ("bert.encoder.layer.1.output.LayerNorm.bias", None),
        ("cls.predictions.transform.dense.bias", None),
        (WORD_EMB, (first_masked, 7)),          # gets lookup + tied-decoder gradient
    ]
    pd = dict(named_d)
    hstep = 1e-4
    for name, idx in checks:
        p = pd[name]
        if idx is None:
            flat = int(gd[name].abs().argmax())
            idx = np.unravel_index(flat, tuple(p.shape))
        idx = tuple(int(i) for i in idx)
        with torch.no_grad():
            orig = p[idx].item()
            p[idx] = orig + hstep
            lp = float(compute_loss(md, train_batch, labels, nsp_labels)[0])
            p[idx] = orig - hstep
            lm_ = float(compute_loss(md, train_batch, labels, nsp_labels)[0])
            p[idx] = orig
        fd = (lp - lm_) / (2 * hstep)
        ag = float(gd[name][idx])
        rel = abs(fd - ag) / max(abs(fd), abs(ag), 1e-30)
        print("finite-diff %s%s: autograd %.10e  fd %.10e  rel.err %.3e" % (name, list(idx), ag, fd, rel))
        assert rel < 1e-5

    # round-trip the files
    rt = read_safetensors(os.path.join(OUT, "model.safetensors"))
    assert np.array_equal(rt[TIED_DECODER], rt[WORD_EMB])
    for n, t in state:
        assert np.array_equal(rt[n], t.numpy())
    rg = read_safetensors(os.path.join(OUT, "gradients.safetensors"))
    assert set(rg) == {n for n, _ in named}
    print("wrote", OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
