"""Bag-of-vectors encoder for a static word-vector file (GloVe / word2vec text).

The SentEval bag-of-vectors baseline on static vectors: a text's feature is the mean of the vectors of
its in-vocabulary words; out-of-vocabulary words (punctuation, words missing from the file) are skipped,
as SentEval's bag-of-words encoder skips them, and a text without any known word is the zero vector.

Words are cut and looked up exactly as the privatizer cuts and looks them up for the same file
(:class:`hf_textdp.tokens.WordTokens`: maximal runs of non-whitespace, exact string lookup; space.md
§3), and the vectors come from the same reader (:func:`hf_textdp.io.vectors.read_vectors`), so the
encoder sees the very rows the mechanisms perturb. The lookup is case-sensitive: a lowercase vector
file needs lowercased text (the recipe's ``lowercase: true``), for the privatizer as for the encoder.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import InvalidParameterError
from ..io.models import resolve_model
from ..io.vectors import read_vectors
from ..tokens import WordTokens
from .encoder_base import Encoder, mean_of_rows


__all__ = ["StaticBagOfVectorsEncoder", "is_vector_file"]


def is_vector_file(model: str) -> bool:
    """Whether ``model`` names an existing file (a static vector file), as :func:`resolve_model` decides.

    Only the file system is asked: a hub id is never resolved (or downloaded) here.
    """
    return Path(model).expanduser().is_file()


class StaticBagOfVectorsEncoder(Encoder):
    """Mean of a static vector file's rows over the in-vocabulary words of each text."""

    name = "bag_of_vectors"

    def __init__(self, model: str) -> None:
        super().__init__(model)
        kind, path, _ = resolve_model(model)
        if kind != "file":
            raise InvalidParameterError(f"a static bag-of-vectors encoder needs a vector file, got {model!r}.")
        vectors = read_vectors(path)
        self._E = np.asarray(vectors.matrix, dtype=np.float32)
        self._tokens = WordTokens({w: i for i, w in enumerate(vectors.words)})
        self._info = {"kind": vectors.kind, "file_sha256": vectors.file_sha256, "d": int(self._E.shape[1])}
        self.last_oov_rate: float | None = None  # share of the words of the last encode() call not in the file

    def describe(self) -> dict[str, Any]:
        # the file's base name and its bytes' SHA-256 name it (not this machine's absolute path)
        return {**super().describe(), "model": Path(self.model).name, **self._info, "oov": "skipped"}

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        rows = self._tokens.encode(list(texts))
        known = [row.ids[row.ids >= 0] for row in rows]
        n_words = sum(row.ids.size for row in rows)
        self.last_oov_rate = float(1.0 - sum(k.size for k in known) / n_words) if n_words else None
        return mean_of_rows(self._E, known)
