"""A model's embedding rows must be finite, and small enough that their squared distances are (issue 53, M1).

A NaN, an infinity or an absurd value (1e39 in a float64 checkpoint, infinite once read as float32) in a row
otherwise surfaces far from its cause, as an ε "far too small for float32", a median row norm of 0 or every pair
of rows equal. :func:`check_rows` refuses it where the matrix is read, naming the row and what it holds.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..errors import InvalidParameterError


__all__ = ["MAX_ROW_NORM", "check_rows"]

#: the largest row norm whose squared distances (up to (2·norm)²) stay finite in float32
MAX_ROW_NORM = math.sqrt(float(np.finfo(np.float32).max)) / 2
_CHUNK = 1 << 16


def check_rows(E: torch.Tensor | np.ndarray, model: str, row_name: str = "row") -> None:
    """Refuse the embedding matrix ``E`` of ``model`` unless every value is finite and every row's norm is at most
    :data:`MAX_ROW_NORM`; ``row_name`` says what a row is (a token id, a word's line)."""
    t = torch.as_tensor(E)
    for start in range(0, int(t.shape[0]), _CHUNK):  # bounded memory on a large vocabulary
        _check_chunk(t[start : start + _CHUNK], start, model, row_name)


def _check_chunk(t: torch.Tensor, start: int, model: str, row_name: str) -> None:
    finite = torch.isfinite(t).all(dim=1)
    if not bool(finite.all()):
        row = int(torch.nonzero(~finite)[0, 0])
        what = "NaN" if bool(torch.isnan(t[row]).any()) else "an infinite value"
        raise InvalidParameterError(
            f"model {model!r}: the model's weights are not finite: embedding {row_name} {start + row} holds {what} "
            "(as float32). The model is damaged or was saved wrongly; use a model whose embedding matrix is finite."
        )
    norms = torch.linalg.vector_norm(t.float(), dim=1)  # a norm beyond float32 is inf: refused all the same
    if bool((norms > MAX_ROW_NORM).any()):
        row = int(torch.nonzero(norms > MAX_ROW_NORM)[0, 0])
        norm = float(torch.linalg.vector_norm(t[row].double()))
        raise InvalidParameterError(
            f"model {model!r}: the model's weights are not usable: embedding {row_name} {start + row} has norm "
            f"{norm:.3g}, above {MAX_ROW_NORM:.3g}, so distances to it overflow float32. Use a model whose "
            "embedding rows are of ordinary size."
        )
