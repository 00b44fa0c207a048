"""Fixtures of the Python module's tests: the CLI it is compared with, and a tiny model directory
(tests/reference/tiny_bert's weights with tests/data/vocab_small's vocabulary)."""
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("BERTLAB_CLI")
    if not path:
        pytest.skip("BERTLAB_CLI (the bertlab command) is not set: run through ctest")
    return path


def run_cli(cli, *args, input=None):
    r = subprocess.run([cli, *map(str, args)], input=input, capture_output=True, text=True)
    assert r.returncode == 0, f"bertlab {' '.join(map(str, args))} failed: {r.stderr}"
    return r.stdout


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny") / "model"
    d.mkdir()
    for f in ("config.json", "model.safetensors"):
        shutil.copy(ROOT / "tests/reference/tiny_bert" / f, d / f)
    shutil.copy(ROOT / "tests/data/vocab_small/vocab.txt", d / "vocab.txt")
    return d


def read_safetensors(path):
    """The tensors of a safetensors file as numpy arrays (F32 and I32 only)."""
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dtype = {"F32": np.float32, "I32": np.int32}[t["dtype"]]
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + b:8 + n + e], dtype=dtype).reshape(t["shape"])
    return out


def seq_csv(path, n, seed):
    """Sentences over the small vocabulary; the label says whether "dog" occurs (learnable), as
    tests/finetune_test_util.h writes them."""
    words = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "hello", "world", "cafe"]
    rng = np.random.default_rng(seed)
    lines = ["text,label"]
    for i in range(n):
        dog = i % 2 == 0
        length = 3 + int(rng.integers(5))
        at = int(rng.integers(length))
        s = " ".join("dog" if dog and k == at else words[int(rng.integers(len(words)))] for k in range(length))
        lines.append(f'"{s}",{"dog" if dog else "no-dog"}')
    Path(path).write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="session")
def machine(tmp_path_factory):
    """A machine.json from a very short calibration (profile needs one)."""
    import bertlab
    path = tmp_path_factory.mktemp("machine") / "machine.json"
    bertlab.calibrate(out=path, seconds=0.001, square=64, batch=1, seq=8, bandwidth_mb=1)
    return path
