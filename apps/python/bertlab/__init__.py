"""bertlab: run, train, profile and model BERT on CPUs and accelerators, from Python.

The same engine as the ``bertlab`` command (one op graph: the executor runs it, the profiler
times it, hwmodel replays it):

- ``Tokenizer.from_pretrained(dir)`` and ``Model.from_pretrained(dir)``: Hugging Face's calling
  conventions, numpy arrays out (``torch.from_numpy`` takes them);
- ``estimate``, ``profile``: the records of ``--json`` as lists of dicts (``pandas.DataFrame``);
- ``train``, ``finetune``: the CLI's flags as keyword arguments, a callback per logged step,
  tqdm progress, Ctrl-C stops at a step boundary with a checkpoint;
- ``calibrate``, ``bench``.

Errors: ValueError for a bad argument, FileNotFoundError for a missing file or directory,
``bertlab.Error`` for the rest, each with the CLI's message. Nothing is printed unless
``verbose=True``; the CLI's notes come as Python warnings.
"""
from ._bertlab import Error
from ._model import Model, ModelOutput, Tokenizer
from ._commands import bench, calibrate, estimate, finetune, profile, train

__version__ = "0.1.0"
__all__ = ["Error", "Model", "ModelOutput", "Tokenizer", "bench", "calibrate", "estimate", "finetune", "profile",
           "train"]
