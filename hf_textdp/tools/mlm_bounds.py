"""dp_mlm's clip bounds ``[a, b]`` measured on public text (dp_mlm.md §6): ``hf-textdp calibrate --mechanism dp_mlm``.

The masked LM reads each public line once (unmasked, as the reference implementation measures them), its
logits over the candidate set C are collected at every candidate position, and the bounds are the
``tail`` and ``1 − tail`` quantiles (fractions, default 10⁻⁴: 0.01 % clipped on each side). The
reference implementation passes the same 0.01 to ``np.percentile``, whose scale is 0–100, so its
bounds are the 0.0001 and 0.0099 *fractions*: both in the lower tail (on N(0, 1) logits −3.71 and
−2.33 instead of ±3.72). Only public text may be read here: bounds from the text being privatized
would depend on it, and the guarantee needs them fixed in advance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..config import PrivatizerConfig
from ..errors import InvalidParameterError
from ..io.masked_lm import load_masked_lm
from ..io.models import load_space
from ..mechanisms.context import RowContext
from ..space import CANDIDATE
from ..tokens import make_tokens
from ..validation import check_open_unit


__all__ = ["clip_bounds", "mlm_clip_bounds"]

#: the fraction of logits clipped on each side by default
DEFAULT_TAIL = 1e-4
#: logits kept for the quantiles (positions × |C| beyond this are subsampled by position, evenly)
MAX_VALUES = 20_000_000


def clip_bounds(values: np.ndarray, tail: float = DEFAULT_TAIL) -> tuple[float, float]:
    """The ``tail`` and ``1 − tail`` quantiles of ``values`` (fractions in (0, ½), not percents).

    Example:

    >>> v = np.linspace(-1.0, 1.0, 10_001)
    >>> [round(x, 6) for x in clip_bounds(v, 0.25)]
    [-0.5, 0.5]
    """
    tail = check_open_unit(tail, "tail")
    if tail >= 0.5:
        raise InvalidParameterError(f"tail must be in (0, 0.5), got {tail!r}.")
    lo, hi = np.quantile(np.asarray(values, dtype=np.float64), [tail, 1.0 - tail])
    if not hi > lo:
        raise InvalidParameterError(f"the public logits give clip bounds [{lo}, {hi}] with no width; use more text.")
    return float(lo), float(hi)


def mlm_clip_bounds(config: PrivatizerConfig, public: Sequence[str], tail: float = DEFAULT_TAIL) -> dict[str, Any]:
    """Bounds for ``config``'s model from the public lines ``public``: ``{"clip": [a, b], "tail", "lines", ...}``."""
    texts = [t for t in public if t.strip()]
    if not texts:
        raise InvalidParameterError("--public: the public file holds no text line.")
    space = load_space(config.model, config.device, config.candidates)
    scorer = load_masked_lm(config.model, space)
    tokens = make_tokens(space, config.passthrough)
    flat, lengths, _ = tokens.encode_flat(texts)
    cls, _ = space.classify(flat)
    cand = cls == CANDIDATE
    at = np.flatnonzero(cand)
    row = np.repeat(np.arange(len(texts), dtype=np.int64), lengths)[cand]
    if at.size == 0:
        raise InvalidParameterError("--public: the public text has no candidate token.")
    keep = max(1, MAX_VALUES // space.V)
    if at.size > keep:
        pick = np.linspace(0, at.size - 1, keep).round().astype(np.int64)
        at, row = at[pick], row[pick]
    ctx = RowContext.from_flat(flat, lengths, at, row)
    cols = space.candidate_ids.to(scorer.device)
    parts = [logits[:, cols].cpu().numpy() for _, logits in scorer.logits(ctx, "once")]
    values = np.concatenate(parts).ravel()
    a, b = clip_bounds(values, tail)
    return {"clip": [a, b], "tail": tail, "lines": len(texts), "positions": int(at.size), "values": int(values.size)}
