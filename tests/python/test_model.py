"""bertlab.Model against `bertlab infer` (bit for bit), and its bad-input errors."""
import json
import shutil
import threading

import numpy as np
import pytest

import bertlab
from conftest import ROOT, read_safetensors, run_cli

INPUT = ROOT / "tests/reference/tiny_bert/input.json"


def batch():
    j = json.loads(INPUT.read_text())
    return {k: np.array(v, dtype=np.int64) for k, v in j.items()}


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_outputs_equal_the_cli_bit_for_bit(cli, tiny_model, tmp_path, precision):
    out = tmp_path / "out.safetensors"
    run_cli(cli, "infer", "--model", tiny_model, "--input", INPUT, "--output", out, "--precision", precision)
    expected = read_safetensors(out)
    model = bertlab.Model.from_pretrained(tiny_model, precision=precision)
    got = model(**batch())
    assert set(got) == set(expected) == {"last_hidden_state", "pooler_output", "mlm_logits", "nsp_logits"}
    for name, e in expected.items():
        assert got[name].dtype == np.float32 and got[name].shape == e.shape, name
        assert np.array_equal(got[name], e), f"{name}: max abs diff {np.abs(got[name] - e).max()}"
    # int32 inputs, and the tokenizer's own output, give the same
    again = model(**{k: v.astype(np.int32) for k, v in batch().items()})
    assert np.array_equal(again.last_hidden_state, expected["last_hidden_state"])


def test_outputs_are_views_that_outlive_later_calls(tiny_model):
    torch = pytest.importorskip("torch")
    model = bertlab.Model.from_pretrained(tiny_model)
    first = model(**batch())
    kept = first["mlm_logits"].copy()
    assert not first["mlm_logits"].flags.owndata  # a view of the engine's memory
    ids = batch()
    ids["input_ids"][:, 1] = 5
    second = model(**ids)
    third = model(**batch())
    assert np.array_equal(first["mlm_logits"], kept)  # not overwritten by the later calls
    assert not np.array_equal(second["mlm_logits"], kept)
    assert np.array_equal(third["mlm_logits"], kept)
    t = torch.from_numpy(first["last_hidden_state"])
    assert t.shape == first["last_hidden_state"].shape and t.dtype == torch.float32


def test_tokenizer_output_runs_as_is(tiny_model):
    tok = bertlab.Tokenizer.from_pretrained(tiny_model)
    model = bertlab.Model.from_pretrained(tiny_model, threads=1)
    enc = tok(["hello world", "the quick brown fox"], padding=True, return_tensors="np")
    out = model(**enc)
    assert out.last_hidden_state.shape == (2, enc["input_ids"].shape[1], 48)
    single = model(**tok("hello world", return_tensors="np"))
    n = single.last_hidden_state.shape[1]
    # the padded row gives the same hidden states at its real positions (within float rounding)
    assert np.allclose(out.last_hidden_state[0, :n], single.last_hidden_state[0], atol=1e-5)


def test_bad_inputs_raise_value_error_naming_the_argument(tiny_model):
    model = bertlab.Model.from_pretrained(tiny_model)
    b = batch()
    cases = [
        (dict(b, input_ids=b["input_ids"].astype(np.float32)), "input_ids: expected an integer array"),
        (dict(b, input_ids=b["input_ids"][0]), r"input_ids: expected a 2-D array"),
        (dict(b, attention_mask=b["attention_mask"][:, :5]), r"attention_mask: shape \(3, 5\) does not match"),
        (dict(b, token_type_ids=b["token_type_ids"][:2]), r"token_type_ids: shape \(2, 13\) does not match"),
        (dict(b, input_ids=b["input_ids"] + 300), r"input_ids\[0\]\[0\] = 302 is outside the vocabulary"),
        (dict(b, input_ids=-b["input_ids"]), "outside the vocabulary"),
        (dict(b, attention_mask=b["attention_mask"] * 2), r"attention_mask\[0\]\[0\] = 2, expected 0 or 1"),
        (dict(input_ids=np.zeros((1, 41), np.int64)), "exceeds max_position_embeddings 40"),
        (dict(input_ids=np.zeros((0, 4), np.int64)), "input_ids: empty array"),
        (dict(input_ids=[[1, 2], [3]]), "input_ids"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            model(**kwargs)
    with pytest.raises(TypeError, match="unexpected keyword argument 'input_id'"):
        model(input_id=b["input_ids"])


def test_bad_directories(tiny_model, tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        bertlab.Model.from_pretrained(tmp_path)
    other = tmp_path / "roberta"
    shutil.copytree(tiny_model, other)
    cfg = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps(dict(cfg, model_type="roberta")))
    with pytest.raises(ValueError, match="model_type"):
        bertlab.Model.from_pretrained(other)
    with pytest.raises(ValueError, match="precision"):
        bertlab.Model.from_pretrained(tiny_model, precision="fp8")
    with pytest.raises(TypeError):
        bertlab.Model.from_pretrained(tiny_model, dtype="fp32")
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model, broken)
    (broken / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    with pytest.raises(bertlab.Error, match="model.safetensors"):
        bertlab.Model.from_pretrained(broken)


def test_two_threads_share_a_model(tiny_model):
    model = bertlab.Model.from_pretrained(tiny_model, threads=1)
    b = batch()
    expected = model(**b)["mlm_logits"].copy()
    results, errors = [], []

    def work():
        try:
            for _ in range(20):
                results.append(model(**b)["mlm_logits"].copy())
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 80 and all(np.array_equal(r, expected) for r in results)


def test_encoder_only_gives_the_same_hidden_states(tiny_model):
    full = bertlab.Model.from_pretrained(tiny_model)(**batch())
    encoder = bertlab.Model.from_pretrained(tiny_model, encoder_only=True)
    assert encoder.heads == "none"
    out = encoder(**batch())
    assert set(out) == {"last_hidden_state", "pooler_output"}
    for name in out:
        assert np.array_equal(out[name], full[name]), name
