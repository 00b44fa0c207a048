"""bertlab.Tokenizer against `bertlab tokenize` on the tokenizer conformance cases."""
import json

import numpy as np
import pytest

import bertlab
from conftest import ROOT, run_cli


def cases():
    out = []
    for line in (ROOT / "tests/data/tokenizer_cases.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or "\t" not in line:
            continue
        config, *texts = line.split("\t")
        if config == "lower" and all(texts):
            out.append(texts[:2])
    assert len(out) > 10
    return out


def cli_ids(cli, vocab_dir, lines, *flags):
    text = run_cli(cli, "tokenize", "--vocab", vocab_dir, "--ids", *flags, input="\n".join(lines) + "\n")
    return [json.loads(line) for line in text.splitlines()]


def test_single_texts_equal_the_cli(cli, tiny_model):
    texts = [c[0] for c in cases()]
    tok = bertlab.Tokenizer.from_pretrained(tiny_model)
    assert [tok(t, add_special_tokens=False)["input_ids"] for t in texts] == cli_ids(cli, tiny_model, texts)
    assert tok(texts)["input_ids"] == cli_ids(cli, tiny_model, texts, "--special")
    assert tok(texts, truncation=True, max_length=7)["input_ids"] == cli_ids(cli, tiny_model, texts, "--special",
                                                                             "--max-length", "7")


def test_pairs_equal_the_cli(cli, tiny_model):
    pairs = [c for c in cases() if len(c) == 2] + [["hello world", "the quick brown fox"]]
    tok = bertlab.Tokenizer.from_pretrained(tiny_model)
    expected = cli_ids(cli, tiny_model, ["\t".join(p) for p in pairs], "--pair", "--special")
    enc = tok([a for a, _ in pairs], [b for _, b in pairs])
    assert enc["input_ids"] == expected
    for ids, types in zip(enc["input_ids"], enc["token_type_ids"]):
        first_sep = ids.index(tok._tok.sep_id)
        assert types == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
    assert tok(*pairs[-1])["input_ids"] == expected[-1]


def test_padding_and_numpy(tiny_model):
    tok = bertlab.Tokenizer.from_pretrained(tiny_model)
    enc = tok(["hello world", "the quick brown fox jumps"], padding=True, return_tensors="np")
    assert set(enc) == {"input_ids", "token_type_ids", "attention_mask"}
    assert all(v.dtype == np.int64 and v.shape == enc["input_ids"].shape for v in enc.values())
    short = tok("hello world")["input_ids"]
    assert enc["input_ids"][0, :len(short)].tolist() == short
    assert enc["input_ids"][0, len(short):].tolist() == [tok.pad_token_id] * (enc["input_ids"].shape[1] - len(short))
    assert enc["attention_mask"][0].tolist() == [1] * len(short) + [0] * (enc["input_ids"].shape[1] - len(short))
    fixed = tok("hello", padding="max_length", max_length=12, return_tensors="np")
    assert fixed["input_ids"].shape == (1, 12)


def test_decode_inverts_encode(tiny_model):
    tok = bertlab.Tokenizer.from_pretrained(tiny_model)
    ids = tok("the quick brown fox jumps over the lazy dog.")["input_ids"]
    assert tok.decode(ids, skip_special_tokens=True) == "the quick brown fox jumps over the lazy dog."
    assert tok.decode(ids).startswith("[CLS] the quick")


def test_bad_arguments(tiny_model, tmp_path):
    with pytest.raises(FileNotFoundError, match="vocab.txt"):
        bertlab.Tokenizer.from_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="no such directory"):
        bertlab.Tokenizer.from_pretrained(tmp_path / "missing")
    tok = bertlab.Tokenizer.from_pretrained(tiny_model)
    with pytest.raises(ValueError, match="padding=True"):
        tok(["a", "b c d"], return_tensors="np")
    with pytest.raises(ValueError, match="return_tensors"):
        tok("a", return_tensors="tf")
    with pytest.raises(ValueError, match="max_length"):
        tok("a", truncation=True, max_length=0)
    with pytest.raises(ValueError, match=r"text\[1\]"):
        tok(["a", 3])
    with pytest.raises(TypeError, match="unexpected keyword argument 'paddding'"):
        tok("a", paddding=True)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([1, 10_000])
