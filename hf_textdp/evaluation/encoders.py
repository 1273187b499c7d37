"""Frozen sentence encoders for the SentEval protocol.

- ``bag_of_vectors``: the mean of the model's input-embedding rows over a text's tokens (special
  tokens excluded). The same rows the mechanisms perturb, so it measures what privatization does to
  the token content itself, and it is fast (one sparse × dense product).
  With a static vector file (GloVe / word2vec text) as the model: the mean of the file's vectors
  over the text's in-vocabulary words (:mod:`.static_encoder`).
- ``mean_pooling``: the transformer's last hidden states, mean-pooled under the attention mask
  (sentence-transformers' pooling for all-MiniLM-L6-v2), batched under ``torch.inference_mode``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch
from transformers import AutoModel, AutoTokenizer

from ..errors import InvalidParameterError
from ..io.models import load_hf_embeddings, resolve_model
from ..space import DEFAULT_MODEL
from .encoder_base import Encoder, mean_of_rows
from .static_encoder import StaticBagOfVectorsEncoder, is_vector_file


__all__ = ["Encoder", "BagOfVectorsEncoder", "MeanPoolingEncoder", "make_encoder", "ENCODERS"]

EncoderName = Literal["bag_of_vectors", "mean_pooling"]
ENCODERS: tuple[str, ...] = ("bag_of_vectors", "mean_pooling")


def _folder(model: str) -> str:
    kind, path, _ = resolve_model(model)
    if kind != "folder":
        raise InvalidParameterError(f"encoder model must be a Hugging Face model folder or hub id, got {model!r}.")
    return str(path)


class BagOfVectorsEncoder(Encoder):
    """Mean of the model's input-embedding rows over the non-special tokens of each text."""

    name = "bag_of_vectors"

    def __init__(self, model: str = DEFAULT_MODEL) -> None:
        super().__init__(model)
        folder = _folder(model)
        self._tokenizer = AutoTokenizer.from_pretrained(folder)
        self._E = load_hf_embeddings(Path(folder)).float().numpy()
        self._special = np.asarray(sorted(set(self._tokenizer.all_special_ids)), dtype=np.int64)

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        enc = self._tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        V = self._E.shape[0]
        return mean_of_rows(self._E, [[t for t in ids if t not in self._special and 0 <= t < V] for ids in enc])


class MeanPoolingEncoder(Encoder):
    """Mean-pooled last hidden states of the (frozen) transformer, as sentence-transformers pools MiniLM."""

    name = "mean_pooling"

    def __init__(self, model: str = DEFAULT_MODEL, *, batch_size: int = 64, max_length: int = 128) -> None:
        super().__init__(model)
        folder = _folder(model)
        self._tokenizer = AutoTokenizer.from_pretrained(folder)
        self._model = AutoModel.from_pretrained(folder).eval()
        self.batch_size = batch_size
        self.max_length = max_length

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "batch_size": self.batch_size, "max_length": self.max_length}

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        texts = list(texts)
        order = np.argsort([len(t) for t in texts], kind="stable")  # similar lengths per batch: less padding
        out = np.zeros((len(texts), int(self._model.config.hidden_size)), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                idx = order[start : start + self.batch_size]
                batch = self._tokenizer(
                    [texts[i] for i in idx],
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                )
                hidden = self._model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
                out[idx] = pooled.float().numpy()
        return out


def make_encoder(name: str, model: str = DEFAULT_MODEL, **kwargs: Any) -> Encoder:
    """Build an encoder by name (``bag_of_vectors`` or ``mean_pooling``).

    ``bag_of_vectors`` with a static vector file as ``model`` (GloVe / word2vec text) averages the
    file's vectors over each text's words (:class:`~.static_encoder.StaticBagOfVectorsEncoder`).
    """
    if name == "bag_of_vectors":
        if is_vector_file(model):
            return StaticBagOfVectorsEncoder(model)
        return BagOfVectorsEncoder(model)
    if name == "mean_pooling":
        return MeanPoolingEncoder(model, **kwargs)
    raise InvalidParameterError(f"Unknown encoder {name!r}. Known encoders: {list(ENCODERS)}.")
