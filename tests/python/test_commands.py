"""estimate, profile, finetune and train from Python against the CLI's own --json and files."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import bertlab
from conftest import ROOT, read_safetensors, run_cli, seq_csv

SYSTEM = ROOT / "configs/systems/paper-ticsat-array.json"
SHAPE = dict(batch=1, seq=16)


def cli_estimate(cli, tmp_path, *args):
    out = tmp_path / "cli.json"
    run_cli(cli, "estimate", *args, "--json", out)
    return json.loads(out.read_text())


def test_estimate_equals_the_cli_json(cli, tiny_model, tmp_path):
    expected = cli_estimate(cli, tmp_path, "--model", tiny_model, "--batch", 1, "--seq", 16, "--system", SYSTEM,
                            "--kernel", "4,8", "--cores", "1,2")
    records = bertlab.estimate(SYSTEM, model=tiny_model, kernel=[4, 8], cores=[1, 2], **SHAPE)
    assert records == bertlab._commands.flatten_estimate(expected)
    assert len(expected) == 2 * 2 * 2  # kernels x cores x both arrangements
    assert len(records) == sum(len(c["nodes"]) for c in expected)
    assert {"name", "op", "seconds", "dram_bytes", "kernel", "cores", "arrangement"} <= set(records[0])
    configs = bertlab.estimate(SYSTEM, model=tiny_model, kernel=[4, 8], cores=[1, 2], level="config", **SHAPE)
    assert [c["seconds"] for c in configs] == [c["seconds"] for c in expected]


def test_estimate_takes_a_system_dict(tiny_model):
    system = json.loads(SYSTEM.read_text())
    by_path = bertlab.estimate(SYSTEM, model=tiny_model, level="config", **SHAPE)
    assert bertlab.estimate(system, model=tiny_model, level="config", **SHAPE) == by_path
    # one field changed in the dict changes the estimate as the same change in a file would
    bigger = dict(system, array=dict(system["array"], kernel=16))
    assert bertlab.estimate(bigger, model=tiny_model, level="config", **SHAPE)[0]["kernel"] == 16
    with pytest.raises(ValueError, match="kernal"):
        bertlab.estimate(dict(system, array=dict(system["array"], kernal=16)), model=tiny_model, **SHAPE)
    with pytest.raises(ValueError, match="corse"):
        bertlab.estimate(dict(system, corse=2), model=tiny_model, **SHAPE)


def test_estimate_bad_arguments(tiny_model, tmp_path):
    with pytest.raises(TypeError, match="unexpected keyword argument 'kernels'"):
        bertlab.estimate(SYSTEM, model=tiny_model, kernels=[4])
    with pytest.raises(TypeError, match="unexpected keyword argument 'json'"):
        bertlab.estimate(SYSTEM, model=tiny_model, json="x.json")
    with pytest.raises(FileNotFoundError):
        bertlab.estimate(tmp_path / "missing.json", model=tiny_model)
    with pytest.raises(ValueError, match="--batch"):
        bertlab.estimate(SYSTEM, model=tiny_model, batch=0)
    with pytest.raises(ValueError, match="level"):
        bertlab.estimate(SYSTEM, model=tiny_model, level="nodes")


def test_calibrate_writes_the_cli_fields(cli, machine, tmp_path):
    run_cli(cli, "calibrate", "--out", tmp_path / "cli.json", "--seconds", 0.001, "--square", 64, "--batch", 1,
            "--seq", 8, "--bandwidth-mb", 1)
    # The cache-resident triad's array size is written only when that triad measured above the
    # DRAM triad (runtime/machine.cpp): at 1 ms per measurement either can happen in either run.
    def fields(j):
        return set(j) - {"bandwidth_resident_array_bytes"}
    mine = json.loads(machine.read_text())
    assert fields(mine) == fields(json.loads((tmp_path / "cli.json").read_text()))
    assert fields(bertlab.calibrate(out=tmp_path / "again.json", seconds=0.001, square=64, batch=1, seq=8,
                                    bandwidth_mb=1)) == fields(mine)


def test_profile_records_match_the_cli(cli, tiny_model, machine, tmp_path):
    out = tmp_path / "profile.json"
    shape = dict(model=tiny_model, batch=2, seq=16, runs=1, threads=1, machine=machine)
    cli_args = []
    for k, v in shape.items():
        cli_args += ["--" + k, v]
    run_cli(cli, "profile", *cli_args, "--json", out)
    expected = json.loads(out.read_text())["nodes"]
    nodes = bertlab.profile(**shape)
    assert len(nodes) == len(expected)
    # the timings differ run to run; everything else is the same record
    for got, want in zip(nodes, expected):
        assert set(got) == set(want)
        for k in ("id", "name", "layer", "op", "phase", "category", "flops", "bytes"):
            assert got[k] == want[k], (got["name"], k)
        assert got["seconds"] > 0
    cats = bertlab.profile(**shape, level="category")
    assert abs(sum(c["share"] for c in cats) - 1) < 1e-6
    with pytest.raises(FileNotFoundError):
        bertlab.profile(**dict(shape, machine=tmp_path / "missing.json"))


def test_bench_reports_throughput(tiny_model):
    r = bertlab.bench(model=tiny_model, batch=2, seq=16, runs=3, threads=1, no_peak=True)
    assert r["seq_per_s"] > 0 and r["min_seq_per_s"] <= r["seq_per_s"] <= r["max_seq_per_s"]
    # step_ms is printed to 0.1 ms
    assert r["runs"] == 3 and abs(r["step_ms"] - 2 / r["seq_per_s"] * 1e3) <= 0.05 + 0.01 * r["step_ms"]


def finetune_args(tiny_model, tmp_path, out, **extra):
    train = seq_csv(tmp_path / "train.csv", 48, 1)
    evaluation = seq_csv(tmp_path / "eval.csv", 16, 2)
    args = dict(task="seq-cls", model=tiny_model, train=train, eval=evaluation, out=out, batch_size=8,
                max_seq_length=16, seed=3, threads=1)
    args.update(extra)
    return args


def test_one_training_step_equals_the_cli(cli, tiny_model, tmp_path):
    args = finetune_args(tiny_model, tmp_path, tmp_path / "py", max_steps=1)
    bertlab.finetune(**args, progress=False)
    cli_args = []
    for k, v in dict(args, out=tmp_path / "cli").items():
        cli_args += ["--" + k.replace("_", "-"), v]
    run_cli(cli, "finetune", *cli_args)
    a, b = read_safetensors(tmp_path / "py/model.safetensors"), read_safetensors(tmp_path / "cli/model.safetensors")
    assert set(a) == set(b)
    start = read_safetensors(tiny_model / "model.safetensors")
    moved = 0
    for name in a:
        assert np.array_equal(a[name], b[name]), name
        moved += name in start and not np.array_equal(a[name], start[name])
    assert moved > 0  # the step changed the encoder


def test_short_finetune_with_callback(tiny_model, tmp_path):
    records = []
    result = bertlab.finetune(**finetune_args(tiny_model, tmp_path, tmp_path / "ft", max_steps=30, log_steps=10,
                                              learning_rate=1e-3), callback=records.append, progress=False)
    assert [r["step"] for r in records] == [10, 20, 30]
    assert all({"loss", "accuracy", "learning_rate", "seq_per_s", "max_steps"} <= set(r) for r in records)
    assert records[-1]["loss"] < records[0]["loss"]
    assert result["eval_results"]["eval_accuracy"] > result["eval_results"]["eval_majority_class_accuracy"]
    model = bertlab.Model.from_pretrained(tmp_path / "ft")
    assert model.heads == "sequence_classification"
    tok = bertlab.Tokenizer.from_pretrained(tmp_path / "ft")
    out = model(**tok(["the dog jumps", "hello world"], padding=True, return_tensors="np"))
    assert out.logits.shape == (2, 2)


def test_unknown_keyword_and_bad_value(tiny_model, tmp_path):
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_step'"):
        bertlab.finetune(**finetune_args(tiny_model, tmp_path, tmp_path / "x", max_step=1))
    with pytest.raises(ValueError, match="--max-seq-length"):
        bertlab.finetune(**finetune_args(tiny_model, tmp_path, tmp_path / "x", max_seq_length=2))
    with pytest.raises(FileNotFoundError, match="missing.csv"):
        bertlab.finetune(**finetune_args(tiny_model, tmp_path, tmp_path / "x", train=tmp_path / "missing.csv"))


def test_callback_exception_stops_at_a_step_with_a_checkpoint(tiny_model, tmp_path):
    def stop(record):
        if record["step"] == 2:
            raise RuntimeError("enough")

    out = tmp_path / "stopped"
    with pytest.raises(RuntimeError, match="enough"):
        bertlab.finetune(**finetune_args(tiny_model, tmp_path, out, max_steps=50, log_steps=1, save_steps=100),
                         callback=stop, progress=False)
    assert (out / "checkpoint-2").is_dir()


def test_ctrl_c_stops_at_a_step_boundary(tiny_model, tmp_path):
    """A real SIGINT to a Python process that is fine-tuning: KeyboardInterrupt after a clean
    stop, a complete checkpoint that resumes, and Python's own SIGINT handler back."""
    out = tmp_path / "sigint"
    args = finetune_args(tiny_model, tmp_path, out, max_steps=50, log_steps=1, save_steps=100)
    script = textwrap.dedent(f"""
        import os, signal, time, bertlab
        def on_step(r):
            if r["step"] == 3:
                os.kill(os.getpid(), signal.SIGINT)
        try:
            bertlab.finetune(**{args!r}, callback=on_step, progress=False)
        except KeyboardInterrupt as e:
            print("interrupted:", e)
        try:  # Python's own handler is back: SIGINT raises KeyboardInterrupt again
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
            print("no KeyboardInterrupt")
        except KeyboardInterrupt:
            print("python handler back")
        r = bertlab.finetune(**dict({args!r}, resume="latest"), progress=False)
        print("resumed:", r["history"][-1]["step"] if r["history"] else None)
    """).replace("PosixPath", "str")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=os.environ)
    assert r.returncode == 0, r.stderr
    assert "interrupted: finetune stopped at a step boundary" in r.stdout
    assert "python handler back" in r.stdout
    assert "resumed: 50" in r.stdout
