"""Tokenizer and Model: Hugging Face's calling conventions over bertlab's tokenizer and executor."""
from __future__ import annotations

import os
import warnings
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _bertlab as _C

TextInput = Union[str, Tuple[str, str]]


class Tokenizer:
    """WordPiece tokenizer of a model directory (vocab.txt [+ tokenizer_config.json]).

    Behaves like Hugging Face's ``BertTokenizer``; the ids are those of ``bertlab tokenize``.

    >>> tok = bertlab.Tokenizer.from_pretrained("out/bert-mini-brown")
    >>> enc = tok(["a first text", "a second"], padding=True, return_tensors="np")
    >>> enc["input_ids"].shape
    """

    def __init__(self, directory: Union[str, os.PathLike]):
        self._tok = _C.Tokenizer(os.fspath(directory))
        self.directory = os.fspath(directory)

    @classmethod
    def from_pretrained(cls, directory: Union[str, os.PathLike]) -> "Tokenizer":
        """Loads DIRECTORY/vocab.txt (FileNotFoundError when it is missing)."""
        return cls(directory)

    @property
    def vocab_size(self) -> int:
        return self._tok.vocab_size

    @property
    def pad_token_id(self) -> int:
        return self._tok.pad_id

    @property
    def model_max_length(self) -> int:
        return self._tok.model_max_length

    def tokenize(self, text: str) -> List[str]:
        """Word pieces of TEXT, without [CLS] and [SEP]."""
        return self._tok.tokenize(text)

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> List[str]:
        return [self._tok.token(int(i)) for i in ids]

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> List[int]:
        return [self._tok.find(t) if self._tok.find(t) >= 0 else self._tok.unk_id for t in tokens]

    def __call__(
        self,
        text: Union[TextInput, Sequence[TextInput]],
        text_pair: Union[str, Sequence[str], None] = None,
        *,
        add_special_tokens: bool = True,
        padding: Union[bool, str] = False,
        truncation: Union[bool, str] = False,
        max_length: Optional[int] = None,
        return_tensors: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Encodes a string, a pair (``tok(a, b)``) or a list of either.

        Returns ``input_ids``, ``token_type_ids`` and ``attention_mask``: lists, or with
        ``return_tensors="np"`` int64 numpy arrays of shape (batch, seq) (a single text gives a
        batch of one). ``padding``: False, True / "longest", or "max_length"; ``truncation``:
        True / "longest_first" cuts to ``max_length`` (default ``model_max_length``).
        """
        batched = isinstance(text, (list, tuple))
        pairs = self._pairs(text, text_pair, batched)
        limit = self._limit(truncation, padding, max_length)
        ids, types = [], []
        for a, b in pairs:
            i, t = self._tok.encode(a, b, add_special_tokens, limit)
            ids.append(i)
            types.append(t)
        masks = [[1] * len(i) for i in ids]
        pad_to = self._pad_length(padding, max_length, ids)
        if pad_to is not None:
            for i, t, m in zip(ids, types, masks):
                n = pad_to - len(i)
                if n > 0:
                    i += [self._tok.pad_id] * n
                    t += [0] * n
                    m += [0] * n
        out = {"input_ids": ids, "token_type_ids": types, "attention_mask": masks}
        if return_tensors is not None:
            if return_tensors != "np":
                raise ValueError(f"return_tensors: expected 'np' (or None), got {return_tensors!r}")
            if len({len(i) for i in ids}) > 1:
                raise ValueError("return_tensors='np' needs sequences of one length: pass padding=True "
                                 "(and truncation=True) to make them so")
            return {k: np.asarray(v, dtype=np.int64).reshape(len(ids), -1) for k, v in out.items()}
        if not batched:
            return {k: v[0] for k, v in out.items()}
        return out

    def _pairs(self, text, text_pair, batched) -> List[Tuple[str, Optional[str]]]:
        if not batched:
            if not isinstance(text, str):
                raise ValueError(f"text: expected a string or a list of strings, got {type(text).__name__}")
            if text_pair is not None and not isinstance(text_pair, str):
                raise ValueError("text_pair: expected a string when text is a string")
            return [(text, text_pair)]
        items = list(text)
        if text_pair is not None:
            if isinstance(text_pair, str) or len(text_pair) != len(items):
                raise ValueError(f"text_pair: expected a list of {len(items)} strings, one per text")
            items = list(zip(items, text_pair))
        out = []
        for k, item in enumerate(items):
            if isinstance(item, str):
                out.append((item, None))
            elif isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(s, str) for s in item):
                out.append((item[0], item[1]))
            else:
                raise ValueError(f"text[{k}]: expected a string or a pair of strings, got {item!r:.60}")
        return out

    def _limit(self, truncation, padding, max_length) -> Optional[int]:
        if truncation not in (False, True, "longest_first", "do_not_truncate"):
            raise ValueError(f"truncation: expected True, False or 'longest_first', got {truncation!r}")
        if padding not in (False, True, "longest", "max_length", "do_not_pad"):
            raise ValueError(f"padding: expected True, False, 'longest' or 'max_length', got {padding!r}")
        if max_length is not None and (not isinstance(max_length, int) or max_length <= 0):
            raise ValueError(f"max_length: expected a positive integer, got {max_length!r}")
        if truncation in (False, "do_not_truncate"):
            return None
        return max_length if max_length is not None else self._tok.model_max_length

    def _pad_length(self, padding, max_length, ids) -> Optional[int]:
        if padding in (False, "do_not_pad"):
            return None
        if padding == "max_length":
            return max_length if max_length is not None else self._tok.model_max_length
        return max(len(i) for i in ids)

    def decode(self, ids: Union[Sequence[int], np.ndarray], skip_special_tokens: bool = False,
               clean_up_tokenization_spaces: bool = True) -> str:
        """Text of a sequence of ids, as Hugging Face's BertTokenizer.decode."""
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise ValueError(f"ids: expected a 1-D sequence of integers, got shape {ids.shape} dtype {ids.dtype}")
        tokens = [self._tok.token(int(i)) for i in ids
                  if not (skip_special_tokens and self._tok.is_special(int(i)))]
        text = " ".join(tokens).replace(" ##", "").strip()
        if clean_up_tokenization_spaces:
            for a, b in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                         (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
                text = text.replace(a, b)
        return text

    def batch_decode(self, sequences, **kwargs) -> List[str]:
        return [self.decode(s, **kwargs) for s in sequences]

    def __repr__(self) -> str:
        return f"bertlab.Tokenizer({self.directory!r}, vocab_size={self.vocab_size})"


class ModelOutput(dict):
    """The outputs by name (a dict), also as attributes: ``out.last_hidden_state``."""

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class Model:
    """A BERT model directory run by bertlab's executor, the engine of ``bertlab infer``.

    ``model(**tokenizer(texts, padding=True, return_tensors="np"))`` returns float32 numpy arrays
    (shared with the engine's memory, no copy): ``last_hidden_state`` (batch, seq, hidden),
    ``pooler_output`` (batch, hidden), and ``mlm_logits`` and ``nsp_logits`` (pretraining
    heads), or ``logits`` (a model fine-tuned by ``bertlab.finetune``). ``torch.from_numpy``
    takes them as they are. One call runs at a time per model (calls from several threads wait
    for each other); the GIL is released while the engine computes.
    """

    def __init__(self, directory: Union[str, os.PathLike], precision: str = "fp32", threads: Optional[int] = None,
                 no_fuse: Sequence[str] = (), encoder_only: bool = False):
        self.directory = os.fspath(directory)
        self._model = _C.Model(self.directory, precision, int(threads or 0), list(no_fuse), bool(encoder_only))
        for note in self._model.notes:
            warnings.warn(note, stacklevel=3)

    @classmethod
    def from_pretrained(cls, directory: Union[str, os.PathLike], precision: str = "fp32",
                        threads: Optional[int] = None, no_fuse: Sequence[str] = (),
                        encoder_only: bool = False) -> "Model":
        """Loads DIRECTORY (config.json [+ model.safetensors]).

        precision: "fp32", "bf16" or "auto" (as ``--precision``); threads: compute threads (None:
        all cores, as the CLI); no_fuse: fusion passes to switch off (as ``--no-fuse``);
        encoder_only: no heads, only ``last_hidden_state`` and ``pooler_output`` (Hugging Face's
        BertModel; ``bench --heads none``), which saves the MLM decoder's work.
        Raises FileNotFoundError without config.json, ValueError for a config that is not BERT's.
        """
        return cls(directory, precision=precision, threads=threads, no_fuse=no_fuse, encoder_only=encoder_only)

    @property
    def heads(self) -> str:
        """The heads run: pretraining, sequence_classification, token_classification or none."""
        return self._model.heads

    @property
    def config(self) -> Dict[str, Any]:
        import json
        return json.loads(self._model.config)

    def __call__(self, input_ids: Any = None, attention_mask: Any = None, token_type_ids: Any = None) -> ModelOutput:
        """Runs the batch; ids of shape (batch, seq), integer dtype. Missing token_type_ids are 0,
        a missing attention_mask is all 1. Raises ValueError for a wrong dtype, rank or shape, ids
        outside the vocabulary or a mask that is not 0/1."""
        if input_ids is None:
            raise ValueError("input_ids: required")
        arrays = []
        for name, a in (("input_ids", input_ids), ("token_type_ids", token_type_ids),
                        ("attention_mask", attention_mask)):
            if a is None:
                arrays.append(None)
                continue
            if hasattr(a, "numpy") and not isinstance(a, np.ndarray):  # a torch tensor
                a = a.detach().cpu().numpy()
            try:
                a = np.asarray(a)
            except ValueError as e:  # numpy refuses ragged lists
                raise ValueError(f"{name}: expected an integer array of shape (batch, seq): {e}") from None
            if a.dtype == object:
                raise ValueError(f"{name}: expected an integer array of shape (batch, seq), got ragged or object data")
            arrays.append(a)
        return ModelOutput(self._model(arrays[0], arrays[1], arrays[2]))

    def __repr__(self) -> str:
        return f"bertlab.Model({self.directory!r}, heads={self.heads!r})"
