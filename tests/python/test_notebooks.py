"""The examples of docs/examples run: both notebooks executed by jupyter nbconvert (on small
models), their plots saved as PNG, and the fine-tuning script on the tiny model."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT, seq_csv

EXAMPLES = ROOT / "docs/examples"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("notebook,png,config,seq", [
    ("estimate_sweep.ipynb", "estimate_sweep.png", "configs/bert-tiny.json", 32),
    ("profile_training.ipynb", "profile_categories.png", "configs/bert-tiny.json", 32),
])
def test_notebook_runs_and_saves_its_plot(tmp_path, notebook, png, config, seq):
    env = dict(os.environ, BERTLAB_ROOT=str(ROOT), BERTLAB_EXAMPLE_CONFIG=str(ROOT / config),
               BERTLAB_EXAMPLE_SEQ=str(seq), BERTLAB_EXAMPLE_OUT=str(tmp_path), BERTLAB_EXAMPLE_QUICK="1")
    r = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "notebook", "--execute",
                        "--ExecutePreprocessor.timeout=600", "--output-dir", str(tmp_path), str(EXAMPLES / notebook)],
                       capture_output=True, text=True, env=env, cwd=EXAMPLES)
    assert r.returncode == 0, f"nbconvert failed (apt-get install jupyter-nbconvert python3-ipykernel):\n{r.stderr[-3000:]}"
    data = (tmp_path / png).read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 5000
    assert (tmp_path / notebook).exists()


def test_finetune_example(tiny_model, tmp_path):
    train, evaluation = seq_csv(tmp_path / "train.csv", 64, 1), seq_csv(tmp_path / "eval.csv", 32, 2)
    r = subprocess.run([sys.executable, str(EXAMPLES / "finetune_classifier.py"), str(tiny_model), str(train),
                        str(evaluation), str(tmp_path / "out"), "60"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("step 12: loss") and "eval accuracy" in r.stdout
    assert lines[-1].startswith("'hello world': ") and lines[-1].split(": ")[1] in ("dog", "no-dog")
