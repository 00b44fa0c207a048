"""estimate, profile, bench, calibrate, train, finetune: the CLI's subcommands run in-process.

Keyword arguments are the command's flags with ``-`` written ``_`` (``max_steps=100`` is
``--max-steps 100``; ``True`` gives a flag, a list repeats the option). An unknown one raises
TypeError, as Python does. The records returned are those the command writes with ``--json``.
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import warnings
from typing import Any, Callable, Dict, List, Optional, Union

from . import _bertlab as _C

_options_cache: Dict[str, Dict[str, bool]] = {}
# Lines of a command's output that a Python user should see: they become warnings.
_WARNING = re.compile(r"^(note|warning|bertlab: (?!error))", re.IGNORECASE)


def _options(command: str) -> Dict[str, bool]:
    if command not in _options_cache:
        _options_cache[command] = dict(_C.command_options(command))
    return _options_cache[command]


# Options that name a file or directory the command reads: a missing one is FileNotFoundError
# (naming the argument) before the command starts.
_INPUTS = {"model", "config", "machine", "data", "eval-data", "train", "eval", "graph", "system", "cluster",
           "compare-profile", "input", "vocab"}


def _argv(function: str, command: str, kwargs: Dict[str, Any], reserved=()) -> List[str]:
    opts = _options(command)
    args = [command]
    for key, value in kwargs.items():
        flag = key.replace("_", "-")
        if flag not in opts or flag in reserved or flag == "help":
            raise TypeError(f"{function}() got an unexpected keyword argument '{key}'")
        if value is None:
            continue
        if flag in _INPUTS and opts[flag] and isinstance(value, (str, os.PathLike)) and not os.path.exists(value):
            raise FileNotFoundError(f"{key}: no such file or directory: {os.fspath(value)}")
        if not opts[flag]:
            if not isinstance(value, bool):
                raise ValueError(f"{key}: expected True or False (a flag), got {value!r}")
            if value:
                args.append("--" + flag)
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if isinstance(v, bool):
                raise ValueError(f"{key}: expected a value, got {v!r}")
            args += ["--" + flag, os.fspath(v) if isinstance(v, os.PathLike) else str(v)]
    return args


def _warn(text: str) -> None:
    for line in text.splitlines():
        if _WARNING.match(line):
            warnings.warn(line, stacklevel=4)


def _run(args: List[str], on_step=None, verbose: bool = False, json_path: str = ""):
    for stream in (sys.stdout, sys.stderr):  # what Python holds goes out before fd 1 and 2 are captured
        if stream is not None:
            stream.flush()
    text, stopped, doc = _C.run_command(args, on_step, verbose, json_path)
    if not verbose:
        _warn(text)
    return text, stopped, doc


def _system_arg(system: Union[str, os.PathLike, Dict[str, Any], None], tmp: str) -> Optional[str]:
    if system is None or isinstance(system, (str, os.PathLike)):
        if system is not None and not os.path.exists(system):
            raise FileNotFoundError(f"system: no such file: {os.fspath(system)}")
        return None if system is None else os.fspath(system)
    if not isinstance(system, dict):
        raise ValueError(f"system: expected a file path or a dict, got {type(system).__name__}")
    path = os.path.join(tmp, "system.json")
    with open(path, "w") as f:
        json.dump(system, f)
    return path


def estimate(system: Union[str, os.PathLike, Dict[str, Any], None] = None, *, level: str = "node",
             verbose: bool = False, **kwargs: Any) -> List[Dict[str, Any]]:
    """Estimates the model's op graph on a system, as ``bertlab estimate --json``.

    system: a system file (configs/systems/, machine.json) or the same as a dict (so that a sweep
    changes one field in a loop); an unknown field raises ValueError naming it. Other keyword
    arguments are estimate's flags: ``model=``, ``batch=``, ``seq=``, ``train=True``,
    ``kernel=[8, 16]``, ``cores=[1, 2]``, ``arrangement=``, ``nodes=`` ...

    level="node" (default): one dict per node and configuration, the node's record of --json
    with its configuration's ``kernel``, ``cores`` and ``arrangement``; level="config": one dict
    per configuration (``kernel``, ``cores``, ``arrangement``, ``seconds``, ``dram_bytes``).
    ``pandas.DataFrame(records)`` takes either as it is.
    """
    if level not in ("node", "config"):
        raise ValueError(f"level: expected 'node' or 'config', got {level!r}")
    with tempfile.TemporaryDirectory(prefix="bertlab-") as tmp:
        out = os.path.join(tmp, "estimate.json")
        args = _argv("estimate", "estimate", kwargs, reserved=("json", "system"))
        sys_path = _system_arg(system, tmp)
        if sys_path:
            args += ["--system", sys_path]
        args += ["--json", out]  # handed over as objects (run_command's json_path), not written
        try:
            _, _, configs = _run(args, verbose=verbose, json_path=out)
        except _C.Error as e:
            if sys_path and isinstance(system, dict) and sys_path in str(e):
                raise ValueError(str(e).replace(sys_path, "system")) from None
            raise
    return flatten_estimate(configs, level)


def flatten_estimate(configs: List[Dict[str, Any]], level: str = "node") -> List[Dict[str, Any]]:
    """The records of ``bertlab estimate --json`` (a list of configurations, each with its nodes)
    as estimate() returns them."""
    if level == "config":
        return [{k: v for k, v in c.items() if k != "nodes"} for c in configs]
    records = []
    for c in configs:
        for n in c["nodes"]:
            records.append({"kernel": c["kernel"], "cores": c["cores"], "arrangement": c["arrangement"], **n})
    return records


def profile(*, level: str = "node", verbose: bool = False, **kwargs: Any) -> Any:
    """Times every node of a run of the op graph, as ``bertlab profile --json``.

    Keyword arguments are profile's flags (``model=``, ``batch=``, ``seq=``, ``mode="train"``,
    ``runs=``, ``threads=``, ``machine=`` ...). level="node" (default): the ``nodes`` records
    (one dict per node: category, flops, bytes, seconds, ...); "category", "phase" or "layer":
    those breakdowns; "all": the whole JSON document (with ``sweep=``: a list of them).
    """
    if level not in ("node", "category", "phase", "layer", "all"):
        raise ValueError(f"level: expected 'node', 'category', 'phase', 'layer' or 'all', got {level!r}")
    with tempfile.TemporaryDirectory(prefix="bertlab-") as tmp:
        out = os.path.join(tmp, "profile.json")
        args = _argv("profile", "profile", kwargs, reserved=("json",)) + ["--json", out]
        _, _, doc = _run(args, verbose=verbose, json_path=out)
    if level == "all" or isinstance(doc, list):
        return doc
    return doc["nodes" if level == "node" else {"category": "categories", "phase": "phases", "layer": "layers"}[level]]


def calibrate(*, verbose: bool = False, **kwargs: Any) -> Dict[str, Any]:
    """Measures this machine's GEMM peak and memory bandwidth, as ``bertlab calibrate``; writes
    ``out`` (default ./machine.json, which profile reads) and returns its contents."""
    out = kwargs.get("out") or "machine.json"
    _run(_argv("calibrate", "calibrate", kwargs), verbose=verbose)
    with open(out) as f:
        return json.load(f)


_THROUGHPUT = re.compile(r"throughput: ([0-9.]+) sequences/s \(median of (\d+) runs; min ([0-9.]+), max ([0-9.]+)\); "
                         r"step ([0-9.]+) ms")


def bench(*, verbose: bool = False, **kwargs: Any) -> Dict[str, Any]:
    """Times whole steps, as ``bertlab bench`` (``model=``, ``mode=``, ``batch=``, ``seq=``,
    ``runs=``, ``threads=`` ...). Returns ``seq_per_s`` (median), ``min_seq_per_s``,
    ``max_seq_per_s``, ``step_ms``, ``runs`` and the command's report as ``text``."""
    text, _, _ = _run(_argv("bench", "bench", kwargs), verbose=False)
    if verbose:
        print(text, end="")
    m = _THROUGHPUT.search(text)
    result: Dict[str, Any] = {"text": text}
    if m:
        result.update(seq_per_s=float(m.group(1)), runs=int(m.group(2)), min_seq_per_s=float(m.group(3)),
                      max_seq_per_s=float(m.group(4)), step_ms=float(m.group(5)))
    return result


class _Progress:
    """Forwards each training step to the user's callback (logged steps) and to tqdm."""

    def __init__(self, callback: Optional[Callable[[Dict[str, Any]], Any]], progress: Optional[bool], desc: str):
        self.callback = callback
        self.bar = None
        self.history: List[Dict[str, Any]] = []
        if progress is not False:
            try:
                from tqdm.auto import tqdm
                self.tqdm = tqdm
            except ImportError:
                if progress:
                    raise
                self.tqdm = None
        else:
            self.tqdm = None
        self.desc = desc

    def __call__(self, step, max_steps, loss, metrics, lr, seq_per_s, logged):
        if self.tqdm is not None:
            if self.bar is None:
                self.bar = self.tqdm(total=max_steps, initial=step - 1, desc=self.desc, unit="step")
            self.bar.update(step - self.bar.n)
            self.bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        if logged:
            record = {"step": step, "max_steps": max_steps, "loss": loss, "learning_rate": lr,
                      "seq_per_s": seq_per_s, **metrics}
            self.history.append(record)
            if self.callback is not None:
                self.callback(record)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _train_like(command: str, callback, progress, verbose, kwargs) -> Dict[str, Any]:
    args = _argv(command, command, kwargs)
    steps = _Progress(callback, progress, command)
    try:
        text, stopped, _ = _run(args, on_step=steps, verbose=verbose)
    finally:
        steps.close()
    out = kwargs.get("out")
    if stopped:
        last = steps.history[-1]["step"] if steps.history else None
        raise KeyboardInterrupt(f"{command} stopped at a step boundary (last logged step {last}); the newest "
                                f"checkpoint in {out} resumes it (resume='latest')")
    result: Dict[str, Any] = {"out": os.fspath(out) if out else None, "history": steps.history, "text": text}
    for name in ("eval_results.json", "train_results.json", "test_results.json"):
        path = os.path.join(out, name) if out else None
        if path and os.path.exists(path):
            with open(path) as f:
                result[name[:-5]] = json.load(f)
    return result


def train(*, callback: Optional[Callable[[Dict[str, Any]], Any]] = None, progress: Optional[bool] = None,
          verbose: bool = False, **kwargs: Any) -> Dict[str, Any]:
    """Pretrains BERT, as ``bertlab train`` (``data=``, ``out=``, ``config=`` or ``model=``,
    ``max_steps=``, ``batch_size=``, ``lr=``, ``no_nsp=True`` ...).

    callback(record) is called at every logged step (``log_steps``) with ``step``,
    ``max_steps``, ``loss``, ``learning_rate``, ``seq_per_s`` and the metrics (``mlm_loss``,
    ``nsp_loss``, ``mlm_accuracy``); an exception from it stops training after that step and
    is raised. A tqdm bar shows progress when tqdm is installed (progress=False: none).
    Ctrl-C stops at the next step boundary, writes a checkpoint and raises KeyboardInterrupt.
    Returns ``out``, ``history`` (the records) and the command's output as ``text``.
    """
    return _train_like("train", callback, progress, verbose, kwargs)


def finetune(*, callback: Optional[Callable[[Dict[str, Any]], Any]] = None, progress: Optional[bool] = None,
             verbose: bool = False, **kwargs: Any) -> Dict[str, Any]:
    """Fine-tunes a classifier, as ``bertlab finetune`` (``task="seq-cls"`` or ``"token-cls"``,
    ``model=``, ``train=``, ``eval=``, ``out=``, ``max_steps=`` or ``num_train_epochs=``,
    ``learning_rate=``, ``batch_size=``, ``test=`` ...). callback, progress and Ctrl-C as in train();
    the records carry ``accuracy``. Returns ``out``, ``history``, ``eval_results``, ``test_results`` (with test=) and
    ``train_results`` (the files of ``out``) and the command's output as ``text``.
    """
    return _train_like("finetune", callback, progress, verbose, kwargs)
