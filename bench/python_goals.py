"""Issue 40's goals for the Python module, measured against the CLI in one session:
1. Model(...) on BERT-base, batch 8 x seq 128, against `bertlab bench --mode infer` (same shape,
   heads and threads: the pretraining heads, and encoder_only=True against --heads none, bench's
   default): medians of RUNS runs each, interleaved in ROUNDS rounds;
2. estimate of 24 configurations (kernel 4,8,16,32 x cores 1,2,4 x both arrangements) from
   Python against the CLI's wall time (process start included);
3. `import bertlab` time (a fresh interpreter, minus one that imports nothing).

usage: PYTHONPATH=build/python python3 bench/python_goals.py build/bertlab [RUNS] [ROUNDS]
The machine should be otherwise idle; the numbers are printed, nothing is asserted.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import bertlab

ROOT = Path(__file__).resolve().parents[1]
cli = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 10
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
threads = os.cpu_count()


def bench_cli(heads):
    out = subprocess.run([cli, "bench", "--config", ROOT / "configs/bert-base.json", "--mode", "infer", "--batch", "8",
                          "--seq", "128", "--runs", str(runs), "--warmup", "1", "--threads", str(threads), "--no-peak",
                          "--heads", heads],
                         capture_output=True, text=True, check=True).stdout
    return float(re.search(r"step ([0-9.]+) ms", out).group(1))


def bench_python(model, batch):
    model(**batch)  # warm-up (also builds the second executor the loop alternates with)
    model(**batch)
    secs = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = model(**batch)
        secs.append(time.perf_counter() - t0)
    del out
    return statistics.median(secs) * 1e3


with tempfile.TemporaryDirectory() as tmp:
    d = Path(tmp) / "base"
    d.mkdir()
    (d / "config.json").write_text((ROOT / "configs/bert-base.json").read_text())
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no model.safetensors: initialised like BERT
        models = {"pretraining": bertlab.Model.from_pretrained(d, threads=threads),
                  "none": bertlab.Model.from_pretrained(d, threads=threads, encoder_only=True)}
    rng = np.random.default_rng(0)
    batch = {"input_ids": rng.integers(0, 30522, (8, 128)), "token_type_ids": np.zeros((8, 128), np.int64),
             "attention_mask": np.ones((8, 128), np.int64)}
    for heads, model in models.items():
        cli_ms, py_ms = [], []
        for r in range(rounds):
            cli_ms.append(bench_cli(heads))
            py_ms.append(bench_python(model, batch))
            print(f"heads {heads}, round {r + 1}: bench --mode infer {cli_ms[-1]:.1f} ms, Model {py_ms[-1]:.1f} ms",
                  flush=True)
        c, p = statistics.median(cli_ms), statistics.median(py_ms)
        print(f"1. BERT-base b8 s128, {threads} threads, heads {heads}: CLI bench {c:.1f} ms, Python Model {p:.1f} ms: "
              f"{100 * (p / c - 1):+.1f}% (goal: within 3%)", flush=True)
    del models
    # The Python call's own cost (arrays in, dict of views out), on the tiny fixture: everything
    # but the engine's run.
    tiny = Path(tmp) / "tiny"
    tiny.mkdir()
    for f in ("config.json", "model.safetensors"):
        (tiny / f).write_bytes((ROOT / "tests/reference/tiny_bert" / f).read_bytes())
    small = bertlab.Model.from_pretrained(tiny, threads=1)
    tb = {k: np.zeros((8, 16), np.int64) for k in ("input_ids", "token_type_ids")}
    tb["attention_mask"] = np.ones((8, 16), np.int64)
    for _ in range(3):
        small(**tb)
    t0 = time.perf_counter()
    for _ in range(200):
        small(**tb)
    print(f"   a whole call on the tiny model (b8 s16, conversion included): {(time.perf_counter() - t0) / 200 * 1e3:.3f} ms")

    sweep = ["--config", str(ROOT / "configs/bert-base.json"), "--batch", "1", "--seq", "128", "--system",
             str(ROOT / "configs/systems/paper-ticsat-array.json"), "--kernel", "4,8,16,32", "--cores", "1,2,4",
             "--arrangement", "both"]
    t0 = time.perf_counter()
    subprocess.run([cli, "estimate", *sweep, "--json", str(Path(tmp) / "e.json")], check=True, capture_output=True)
    cli_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    recs = bertlab.estimate(ROOT / "configs/systems/paper-ticsat-array.json", config=ROOT / "configs/bert-base.json",
                            batch=1, seq=128, kernel=[4, 8, 16, 32], cores=[1, 2, 4], arrangement="both", level="config")
    py_s = time.perf_counter() - t0
    assert len(recs) == 24, len(recs)
    print(f"2. estimate, 24 configurations (BERT-base s128): CLI {cli_s:.2f} s, Python {py_s:.2f} s: "
          f"{100 * (py_s / cli_s - 1):+.1f}% (goal: within 10%)")

imports = []
for _ in range(5):
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import bertlab"], check=True)
    t1 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    imports.append((t1 - t0) - (time.perf_counter() - t1))
print(f"3. import bertlab: {statistics.median(imports) * 1e3:.0f} ms (median of 5; goal: under 500 ms)")
