"""santext (Yue et al. 2021, SanText, arXiv:2106.01221; santext.md §1): the exponential mechanism over C.

santext outputs y ∈ C with probability

    P[y | w] = exp(−(ε/2)·d(w, y)) / Σ_{y'∈C} exp(−(ε/2)·d(w, y'))          (the paper's Eq. 1)

with d the Euclidean distance between rows of the public matrix E. It is TEM (tem.md) with γ = ∞
and satisfies ε·d metric DP (δ = 0); per token ε_tok = ε·diam. Unlike the authors' code, no V × V
probability matrix is built (the exact rejection sampler of :mod:`~hf_textdp.mechanisms.exponential`)
and C is the tokenizer's candidate set, never the words of the data being sanitised. The public counts
that santext_plus (:mod:`~hf_textdp.mechanisms.santext_plus`) needs are checked and ranked here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..errors import InvalidParameterError, ParameterTypeError
from ..scale import scale_stats
from ..validation import check_int
from .tem import Tem


if TYPE_CHECKING:
    from ..space import EmbeddingSpace


__all__ = ["Santext", "sensitive_set", "check_counts", "candidate_tokens", "mapping_counts"]


class Santext(Tem):
    """SanText: the exponential mechanism −(ε/2)·d over the whole candidate set (santext.md §1).

    Args:
        epsilon (`float`): metric ε per unit of Euclidean distance between rows of E.
        chunk_size (`int`, *optional*, defaults to `4096`): kept for configurations written before
            stream version 2; the sampler does not depend on it.

    Example:

    >>> mech = Santext(epsilon=2.0)
    >>> mech.gamma_for(30517)
    inf
    >>> Santext(epsilon=2.0, chunk_size=0)
    Traceback (most recent call last):
    ...
    hf_textdp.errors.InvalidParameterError: chunk_size must be an int >= 1, got 0.
    """

    name = "santext"
    OPTIONS = {"chunk_size": 4096}

    def _validate(self) -> None:
        self.beta = None
        self.gamma = math.inf
        self.sampler = "dense"
        self.chunk_size = check_int(self.options["chunk_size"], "chunk_size", minimum=1)

    def gamma_for(self, V: int) -> float:
        return math.inf

    def details(self, space: EmbeddingSpace) -> dict[str, Any]:
        stats = scale_stats(space.E, store=space.store)
        return {"metric_dp": {"epsilon": self.epsilon, "metric": "euclidean"}, "diam_exact": stats.diam_exact}


# --------------------------------------------------------------------------- counts and V_S
def sensitive_set(counts: npt.ArrayLike, w: float) -> npt.NDArray[np.int64]:
    """Positions of V_S: the first ⌊w·V⌋ candidates by (count ascending, position ascending) (santext.md §2).

    Args:
        counts (array of `V` numbers): public count of each candidate, in candidate (id) order.
        w (`float`): fraction of C treated as sensitive, in (0, 1].

    Returns:
        `numpy.ndarray` of int64: the positions of V_S, ascending. n_S = ⌊w·V + 10⁻¹²⌋ (the 10⁻¹²
        absorbs the float error of products such as 0.6·5 = 2.9999999999999996).

    Example:

    >>> sensitive_set([50, 7, 3, 3, 900], 0.6).tolist()
    [1, 2, 3]
    """
    c = np.asarray(counts)
    V = int(c.shape[0])
    n_s = int(math.floor(w * V + 1e-12))
    order = np.lexsort((np.arange(V), c))  # last key first: count, then position
    return np.sort(order[:n_s]).astype(np.int64)


def parse_count(value: Any, where: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ParameterTypeError(f"frequencies: {where} must be a number, got {type(value).__name__}.")
    x = int(value) if isinstance(value, (int, np.integer)) else float(value)
    if not math.isfinite(x) or x < 0:
        raise InvalidParameterError(f"frequencies: {where} must be a finite count >= 0, got {value!r}.")
    return x


def check_counts(mapping: Mapping[Any, Any]) -> dict[str, int | float]:
    """``frequencies`` as a mapping token string → finite count ≥ 0 (raises naming ``frequencies``)."""
    out: dict[str, int | float] = {}
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise ParameterTypeError(f"frequencies: keys must be token strings, got {type(key).__name__}.")
        out[key] = parse_count(value, "the count of a token")
    return out


def candidate_tokens(space: EmbeddingSpace) -> list[str]:
    """The token string of each candidate, in candidate order (the keys ``frequencies`` uses)."""
    ids = space.candidate_ids.tolist()
    if space.words is not None:
        return [space.words[i] for i in ids]
    tokens: list[str] = space.tokenizer.convert_ids_to_tokens(ids)
    return tokens


def mapping_counts(mapping: Mapping[str, int | float], tokens: Sequence[str]) -> npt.NDArray[Any]:
    """The count of each token (0 when absent): int64, or float64 when some count is a float."""
    vals = [mapping.get(t, 0) for t in tokens]
    return np.asarray(vals, dtype=np.float64 if any(isinstance(v, float) for v in vals) else np.int64)
