#!/usr/bin/env python3
"""Independent token-classification fine-tuning (POS tagging) of the same model on the same
CoNLL files, to tell a bertlab bug from a recipe that cannot do better: the plain torch.nn BERT
of make_golden.py (Hugging Face names) with Hugging Face's BertForTokenClassification head
(dropout, then a linear `classifier` on every token of the last hidden state), the tokenizer of
bert_tokenizer_reference.py, run_ner.py's label alignment (the first sub-word of each word
carries its tag, every other position -100), torch.optim.AdamW, clip_grad_norm_(1.0), and the
linear warmup + decay of get_linear_schedule_with_warmup; fp32.

    /usr/bin/python3 tests/reference/finetune_reference.py MODEL_DIR TRAIN.conll EVAL.conll OUT.jsonl \
        [--steps 1000] [--batch 16] [--max-seq-length 64] [--eval-max-seq-length 512] [--lr 5e-4] \
        [--warmup-ratio 0.1] [--from-scratch] [--group-by-length] [--threads 1] [--eval-every K]

The defaults are the flags of scripts/finetune_pos.sh and bertlab finetune's defaults
(Hugging Face TrainingArguments: weight decay 0, Adam epsilon 1e-8, dropout as config.json).
Writes one JSON line per evaluation: step, eval_accuracy (over the words whose first sub-word
fits in --eval-max-seq-length, as bertlab counts them), eval_loss, eval_count, eval_words,
and the mean training loss and accuracy since the previous evaluation. Options to study the
recipe (not bertlab flags): --classifier-lr, --reinit-layers, --dropout, --weight-decay.
--probe prints, without training, the mean cosine between each layer's output and the
embedding output at the same position (how much of a token's identity the encoder keeps).
--eval-only scores a directory written by `bertlab finetune` (its classifier rows mapped by
id2label) with this script's forward pass and metric, without training.

    /usr/bin/python3 tests/reference/finetune_reference.py --compare NAME=PATH [NAME=PATH ...]

prints the eval accuracies (and the mean training loss per 100 steps; run this script with
--log-steps 100) of bertlab output directories (metrics.jsonl) and of this script's
JSON lines side by side (markdown), by step.
"""

import argparse
import json
import math
import os
import pickle
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bert_tokenizer_reference as tr  # noqa: E402
import make_golden as mg  # noqa: E402

CLS, SEP, PAD = "[CLS]", "[SEP]", "[PAD]"


def read_conll(path):
    """Sentences as (words, tags): one `word<TAB>tag` per line, blank lines between sentences."""
    sents, words, tags = [], [], []
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if not line.strip():
            if words:
                sents.append((words, tags))
            words, tags = [], []
            continue
        w, t = line.split("\t")[:2]
        words.append(w)
        tags.append(t)
    if words:
        sents.append((words, tags))
    return sents


def encode(sents, label2id, vocab, basic, max_len, cache):
    """run_ner.py's alignment: [CLS] pieces... [SEP], cut so that [SEP] still fits in max_len;
    the first piece of a word gets its tag id, every other position -100. Returns the examples
    and the number of words that kept a labelled first piece."""
    out, counted = [], 0
    for words, tags in sents:
        ids, labels = [vocab[CLS]], [-100]
        full = False
        for w, t in zip(words, tags):
            if w not in cache:
                cache[w] = [vocab[p] for p in tr.tokenize(w, vocab, basic)]
            for k, piece in enumerate(cache[w]):
                if len(ids) + 1 >= max_len:
                    full = True
                    break
                ids.append(piece)
                labels.append(label2id[t] if k == 0 else -100)
                counted += k == 0
            if full:
                break
        ids.append(vocab[SEP])
        labels.append(-100)
        out.append((np.array(ids, dtype=np.int64), np.array(labels, dtype=np.int64)))
    return out, counted


def collate(examples, pad_id):
    s = max(len(ids) for ids, _ in examples)
    ids = torch.full((len(examples), s), pad_id, dtype=torch.long)
    lab = torch.full((len(examples), s), -100, dtype=torch.long)
    mask = torch.zeros((len(examples), s), dtype=torch.long)
    for b, (i, l) in enumerate(examples):
        ids[b, :len(i)] = torch.from_numpy(i)
        lab[b, :len(l)] = torch.from_numpy(l)
        mask[b, :len(i)] = 1
    return ids, lab, mask


class TokenClassifier(nn.Module):
    """BertForTokenClassification: BertModel without pooler, dropout, `classifier`."""

    def __init__(self, c, num_labels, hidden_p, attn_p):
        super().__init__()
        self.bert = mg.BertModel(c)
        del self.bert.pooler  # add_pooling_layer=False
        self.p, self.attn_p = hidden_p, attn_p
        self.classifier = nn.Linear(c["hidden_size"], num_labels)

    def forward(self, ids, mask):
        bert = self.bert
        x = F.dropout(bert.embeddings(ids, torch.zeros_like(ids)), self.p, self.training)
        ext = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in bert.encoder.layer:
            x = self.layer(layer, x, ext)
        return self.classifier(F.dropout(x, self.p, self.training))

    def layer(self, layer, x, ext):
        """make_golden.py's BertLayer with Hugging Face's three dropouts (probabilities,
        attention output, FFN output), each applied before the residual add."""
        sa = layer.attention.self
        q, k, v = sa.split(sa.query(x)), sa.split(sa.key(x)), sa.split(sa.value(x))
        probs = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(sa.hd) + ext, dim=-1)
        probs = F.dropout(probs, self.attn_p, self.training)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(x.shape)
        so = layer.attention.output
        a = so.LayerNorm(F.dropout(so.dense(ctx), self.p, self.training) + x)
        o = layer.output
        return o.LayerNorm(F.dropout(o.dense(layer.intermediate(a)), self.p, self.training) + a)


def hf_init(module, std, pad_id=None):
    """Hugging Face's _init_weights: normal(0, std) weights, zero biases, LayerNorm 1/0."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "LayerNorm" in name:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            elif name == "weight" or name.endswith(".weight"):  # "weight": a bare nn.Linear
                p.normal_(0.0, std)
            else:
                p.zero_()
        if pad_id is not None:
            module.embeddings.word_embeddings.weight[pad_id].zero_()


def load_pretrained(model, model_dir):
    """Every encoder tensor from model.safetensors (bert.*); pooler and cls.* are not used.
    Fails on a missing tensor, so nothing is silently left at its random value."""
    state = mg.read_safetensors(os.path.join(model_dir, "model.safetensors"))
    loaded = 0
    with torch.no_grad():
        for name, p in model.bert.named_parameters():
            key = "bert." + name
            if key not in state:
                sys.exit(f"finetune_reference: {model_dir}: missing tensor {key}")
            t = torch.from_numpy(state[key].copy())
            if t.shape != p.shape:
                sys.exit(f"finetune_reference: {key}: shape {tuple(t.shape)}, expected {tuple(p.shape)}")
            p.copy_(t)
            loaded += 1
    return loaded


def length_grouped_order(lengths, batch, rng):
    """Hugging Face's LengthGroupedSampler as bertlab implements it: a permutation, cut into
    mega-batches of 50 batches, each sorted by length, longest first."""
    order = rng.permutation(len(lengths))
    mega = 50 * batch
    for m in range(0, len(order), mega):
        part = order[m:m + mega]
        order[m:m + mega] = part[np.argsort(-lengths[part], kind="stable")]
    return order


def evaluate(model, data, batch, pad_id):
    model.eval()
    hits = n = 0
    loss = 0.0
    order = np.argsort([-len(i) for i, _ in data], kind="stable")
    with torch.no_grad():
        for first in range(0, len(data), batch):
            ids, lab, mask = collate([data[j] for j in order[first:first + batch]], pad_id)
            logits = model(ids, mask)
            sel = lab != -100
            y = lab[sel]
            lg = logits[sel]
            hits += int((lg.argmax(-1) == y).sum())
            n += int(y.numel())
            loss += float(F.cross_entropy(lg, y, reduction="sum"))
    return hits / max(n, 1), loss / max(n, 1), n


def evaluations(path):
    """(step, accuracy, loss) of every evaluation in a bertlab output directory (its
    metrics.jsonl) or in a JSON-lines file written by this script."""
    f = os.path.join(path, "metrics.jsonl") if os.path.isdir(path) else path
    return [(m["step"], m["eval_accuracy"], m["eval_loss"]) for m in map(json.loads, open(f)) if "eval_accuracy" in m]


def train_losses(path, window=100):
    """Mean training loss over each window of `window` steps, by the window's last step: from
    bertlab's per-step lines, or from this script's --log-steps lines (taken when they fall on
    a window's end, so run it with --log-steps equal to the window)."""
    f = os.path.join(path, "metrics.jsonl") if os.path.isdir(path) else path
    lines = [m for m in map(json.loads, open(f)) if "loss" in m and "eval_accuracy" not in m]
    if os.path.isdir(path):
        by_step = {m["step"]: m["loss"] for m in lines}
        return {s: sum(by_step[t] for t in range(s - window + 1, s + 1)) / window
                for s in range(window, max(by_step, default=0) + 1, window)
                if all(t in by_step for t in range(s - window + 1, s + 1))}
    return {m["step"]: m["loss"] for m in lines if m["step"] % window == 0}


def compare(runs):
    """Markdown tables of the evaluations of NAME=PATH runs, side by side by step, and of their
    mean training loss per 100 steps."""
    runs = [r.split("=", 1) for r in runs]
    for title, fmt, get in (("eval accuracy", lambda v: f"{100 * v:.2f}%",
                             lambda p: {s: a for s, a, _ in evaluations(p)}),
                            ("mean training loss of the 100 steps up to", lambda v: f"{v:.3f}", train_losses)):
        cols = [(name, get(path)) for name, path in runs]
        steps = sorted(set().union(*(c.keys() for _, c in cols)))
        if not steps:
            continue
        print(f"\n{title}:\n")
        print("| step | " + " | ".join(name for name, _ in cols) + " |")
        print("|---|" + "---|" * len(cols))
        for step in steps:
            print(f"| {step} | " + " | ".join(fmt(c[step]) if step in c else "" for _, c in cols) + " |")


def probe(model, evald, pad_id, count=200):
    """How much of a token's own embedding is left in each layer's output: the mean cosine
    between layer l's hidden state and the embedding output at the same position (1 = the
    encoder passes the token through unchanged), over the first `count` eval sentences."""
    model.eval()
    ids, _, mask = collate(evald[:count], pad_id)
    with torch.no_grad():
        x = model.bert.embeddings(ids, torch.zeros_like(ids))
        ext = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        outs = [x]
        for layer in model.bert.encoder.layer:
            outs.append(model.layer(layer, outs[-1], ext))
    sel = mask.bool()
    return [round(float(F.cosine_similarity(h[sel], outs[0][sel], dim=-1).mean()), 3) for h in outs]


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--compare":
        return compare(sys.argv[2:])
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("train")
    ap.add_argument("eval")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--max-seq-length", type=int, default=64)
    ap.add_argument("--eval-max-seq-length", type=int, default=512)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--classifier-lr", type=float, default=None, help="peak lr of the classifier (default --lr)")
    ap.add_argument("--warmup-ratio", type=float, default=0.1)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--dropout", type=float, default=None, help="default: config.json's probabilities")
    ap.add_argument("--reinit-layers", type=int, default=0, help="re-initialise the top N encoder layers")
    ap.add_argument("--from-scratch", action="store_true")
    ap.add_argument("--group-by-length", action="store_true")
    ap.add_argument("--eval-every", type=int, default=0, help="default: at the end only")
    ap.add_argument("--log-steps", type=int, default=0, help="also write the mean training loss every N steps")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache", help="a file that keeps the encoded data for the next run")
    ap.add_argument("--probe", action="store_true",
                    help="no training: print how much of each token's embedding each layer's output keeps")
    ap.add_argument("--eval-only", action="store_true",
                    help="MODEL is a fine-tuned directory (bertlab finetune --out): evaluate its classifier, no training")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    t_start = time.time()

    c = json.load(open(os.path.join(a.model, "config.json")))
    vocab = {t: i for i, t in enumerate(l.rstrip("\n") for l in open(os.path.join(a.model, "vocab.txt"), encoding="utf-8"))}
    cap = c["max_position_embeddings"]
    key = [os.path.abspath(f) for f in (a.train, a.eval, os.path.join(a.model, "vocab.txt"))]
    key += [min(a.max_seq_length, cap), min(a.eval_max_seq_length, cap)]
    data = None
    if a.cache and os.path.exists(a.cache):
        with open(a.cache, "rb") as f:
            data = pickle.load(f)
        if data["key"] != key:
            data = None
    if data is None:
        tk_file = os.path.join(a.model, "tokenizer_config.json")
        tk = json.load(open(tk_file)) if os.path.exists(tk_file) else {}
        basic = tr.BasicTokenizer(tk.get("do_lower_case", True), tk.get("strip_accents", None))
        train_s, eval_s = read_conll(a.train), read_conll(a.eval)
        names = sorted({t for _, tags in train_s for t in tags})
        label2id = {t: i for i, t in enumerate(names)}
        for _, tags in eval_s:
            for t in tags:
                if t not in label2id:
                    sys.exit(f"finetune_reference: {a.eval}: tag {t!r} is not in the training file")
        cache = {}
        train, _ = encode(train_s, label2id, vocab, basic, key[3], cache)
        evald, eval_counted = encode(eval_s, label2id, vocab, basic, key[4], cache)
        data = {"key": key, "names": names, "train": train, "eval": evald, "eval_counted": eval_counted,
                "eval_words": sum(len(w) for w, _ in eval_s)}
        if a.cache:
            with open(a.cache + ".tmp", "wb") as f:
                pickle.dump(data, f)
            os.replace(a.cache + ".tmp", a.cache)
    names, train, evald = data["names"], data["train"], data["eval"]
    eval_counted, eval_words = data["eval_counted"], data["eval_words"]
    pad_id = vocab[PAD]

    p_hidden = c["hidden_dropout_prob"] if a.dropout is None else a.dropout
    p_attn = c["attention_probs_dropout_prob"] if a.dropout is None else a.dropout
    model = TokenClassifier(c, len(names), p_hidden, p_attn)
    std = c["initializer_range"]
    hf_init(model.bert, std, c["pad_token_id"])
    hf_init(model.classifier, std)
    loaded = 0 if a.from_scratch else load_pretrained(model, a.model)
    if a.probe:
        rec = {"model": a.model, "from_scratch": a.from_scratch, "reinit_layers": a.reinit_layers,
               "cos_to_embedding_by_layer": probe(model, evald, pad_id)}
        open(a.out, "w").write(json.dumps(rec) + "\n")
        print(json.dumps(rec))
        return
    if a.eval_only:
        # The fine-tuned classifier, its rows put in this script's label order.
        state = mg.read_safetensors(os.path.join(a.model, "model.safetensors"))
        id2label = {int(k): v for k, v in c["id2label"].items()}
        rows = [next(i for i, n in id2label.items() if n == name) for name in names]
        with torch.no_grad():
            model.classifier.weight.copy_(torch.from_numpy(state["classifier.weight"][rows].copy()))
            model.classifier.bias.copy_(torch.from_numpy(state["classifier.bias"][rows].copy()))
        acc, eloss, n = evaluate(model, evald, 32, pad_id)
        rec = {"model": a.model, "eval_accuracy": acc, "eval_loss": eloss, "eval_count": n, "eval_words": eval_words}
        open(a.out, "w").write(json.dumps(rec) + "\n")
        print(json.dumps(rec))
        return
    for layer in model.bert.encoder.layer[len(model.bert.encoder.layer) - a.reinit_layers:] if a.reinit_layers else []:
        hf_init(layer, std)

    groups = {}
    for n, p in model.named_parameters():
        decay = 0.0 if mg.is_no_decay(n) else a.weight_decay
        lr = a.classifier_lr if (a.classifier_lr and n.startswith("classifier.")) else a.lr
        groups.setdefault((decay, lr), []).append(p)
    opt = torch.optim.AdamW([{"params": ps, "weight_decay": d, "lr": lr} for (d, lr), ps in groups.items()],
                            lr=a.lr, betas=(0.9, 0.999), eps=1e-8)
    warmup = math.ceil(a.warmup_ratio * a.steps)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: s / warmup if s < warmup else max(0.0, (a.steps - s) / max(1, a.steps - warmup)))

    print(json.dumps({"labels": len(names), "train_sentences": len(train), "eval_sentences": len(evald),
                      "eval_words": eval_words, "eval_counted": eval_counted, "loaded_tensors": loaded,
                      "prep_s": round(time.time() - t_start, 1)}), flush=True)
    rng = np.random.default_rng(a.seed)
    lengths = np.array([len(i) for i, _ in train])
    order, at = None, len(train)
    out = open(a.out, "w")
    loss_sum = hits = count = 0
    log_sum, last_eval = 0.0, 0
    t0 = time.time()
    for step in range(1, a.steps + 1):
        if at >= len(train):  # a new epoch; the last batch of an epoch may be short
            order = length_grouped_order(lengths, a.batch, rng) if a.group_by_length else rng.permutation(len(train))
            at = 0
        idx = order[at:at + a.batch]
        at += a.batch
        ids, lab, mask = collate([train[j] for j in idx], pad_id)
        model.train()
        logits = model(ids, mask)
        sel = lab != -100
        loss = F.cross_entropy(logits[sel], lab[sel])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        lr_used = sched.get_last_lr()[0]
        opt.step()
        sched.step()
        loss_sum += float(loss)
        log_sum += float(loss)
        if a.log_steps and step % a.log_steps == 0:
            out.write(json.dumps({"step": step, "loss": log_sum / a.log_steps, "lr": lr_used}) + "\n")
            out.flush()
            log_sum = 0.0
        hits += int((logits[sel].argmax(-1) == lab[sel]).sum())
        count += int(sel.sum())
        if (a.eval_every and step % a.eval_every == 0) or step == a.steps:
            acc, eloss, n = evaluate(model, evald, 32, pad_id)
            rec = {"step": step, "eval_accuracy": acc, "eval_loss": eloss, "eval_count": n,
                   "eval_words": eval_words, "train_loss": loss_sum / (step - last_eval),
                   "train_accuracy": hits / max(count, 1), "from_scratch": a.from_scratch,
                   "train_s": round(time.time() - t0, 1)}
            loss_sum = hits = count = 0
            last_eval = step
            out.write(json.dumps(rec) + "\n")
            out.flush()
            print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
