"""Draws for the audit (testing.md §3): outputs of one configured mechanism through its own interfaces
(``perturb`` + the post-processing step, or ``sample``) from fresh, counted, keyed row streams, and for vector
releases the public direction from f(w) to f(w') that reduces each output to a scalar."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..mechanisms.base import AdditiveMechanism, Mechanism, SelectionMechanism
from ..postprocess import PostprocessStep, UnsafePostprocessStep
from ..rng import Streams, derive_row_seed, streams_for_rows
from ..space import EmbeddingSpace


__all__ = ["Sampler", "apply_step"]

_SPLIT = "hf_textdp/audit"
_ROW = 4096  # draws per stream row


def _center(mech: Mechanism, space: EmbeddingSpace, positions: torch.Tensor) -> torch.Tensor:
    """The noise-free pre-image f(w) of an additive mechanism's noisy vector (testing.md §3 step 2).

    ``mech.inputs`` (the vectors handed to ``perturb``), passed through the map ``perturb`` applies
    before adding noise when the mechanism exposes one (``transform_input`` for bounding.md bounds,
    ``project`` for projected mechanisms, or a ``transform_inputs(space, x)`` hook).
    """
    assert isinstance(mech, AdditiveMechanism)
    x: Any = mech.inputs(space, positions)
    for name in ("transform_input", "project"):
        fn = getattr(mech, name, None)
        if callable(fn):
            x = fn(x)
            break
    else:
        fn = getattr(mech, "transform_inputs", None)
        if callable(fn):
            x = fn(space, x)
    return torch.as_tensor(x).to(torch.float32)


def apply_step(
    step: PostprocessStep,
    z: torch.Tensor,
    mech: AdditiveMechanism,
    space: EmbeddingSpace,
    streams: Streams,
    positions: torch.Tensor,
) -> torch.Tensor:
    """Run a post-processing step; an unsafe one (postprocess.md §7) also receives the input positions."""
    if isinstance(step, UnsafePostprocessStep):
        return step.apply_unsafe(z, mech, space, streams, positions)
    return step.apply(z, mech, space, streams)


class Sampler:
    """Draws outputs of one configured mechanism from fresh, counted row streams."""

    def __init__(self, mech: Mechanism, step: PostprocessStep | None, space: EmbeddingSpace, seed: int) -> None:
        self.mech, self.step, self.space, self.seed = mech, step, space, seed
        self.counter = 0
        self.vectors = bool(step is not None and step.RELEASES_VECTORS)

    def _streams(self, m: int) -> Streams:
        key = derive_row_seed(self.seed, self.counter, _SPLIT, 0)
        self.counter += 1
        return streams_for_rows([key], [m], self.space.device)

    def draw(self, position: int, n: int, u: torch.Tensor | None = None) -> np.ndarray:
        """``n`` outputs of M(position): candidate positions; for vector releases the vectors
        ``[n, k]`` (``u`` None) or their projections ⟨z, u⟩ (float64)."""
        mech, step, space = self.mech, self.step, self.space
        parts: list[np.ndarray] = []
        for s in range(0, n, _ROW):
            m = min(_ROW, n - s)
            st = self._streams(m)
            pos = torch.full((m,), position, dtype=torch.int64)
            if isinstance(mech, SelectionMechanism):
                out = mech.sample(space, pos, st)
                parts.append(out.cpu().numpy().astype(np.int64))
                continue
            assert isinstance(mech, AdditiveMechanism) and step is not None
            z = mech.perturb(mech.inputs(space, pos), st)
            out = apply_step(step, z, mech, space, st, pos).cpu()
            if not self.vectors:
                parts.append(out.numpy().astype(np.int64))
            elif u is None:
                parts.append(out.double().numpy())
            else:
                parts.append((out.double() @ u).numpy())
        return np.concatenate(parts)

    def direction(self, a: int, b: int, va: np.ndarray, vb: np.ndarray) -> torch.Tensor:
        """Public unit vector from f(a) to f(b) in the released coordinates (vector releases).

        f is the release map applied to the noise-free vectors (``_center``; the identity for
        ``vector``, Φᵀ for input-space releases). If that cannot be evaluated in the released
        coordinates, the difference of the two selection means is used instead: it too is fixed
        before any estimation draw is read.
        """
        assert isinstance(self.mech, AdditiveMechanism) and self.step is not None
        k = va.shape[1]
        diff: torch.Tensor | None = None
        try:
            c = _center(self.mech, self.space, torch.tensor([a, b]))
            f = self.step.apply(c, self.mech, self.space, streams_for_rows([0], [2])).cpu().double()
            if f.ndim == 2 and f.shape == (2, k):
                diff = f[1] - f[0]
        except Exception:  # noqa: BLE001 - fall back to the selection means below
            diff = None
        if diff is None:
            diff = torch.from_numpy(vb.mean(0) - va.mean(0))
        norm = float(torch.linalg.vector_norm(diff))
        if not norm > 0:
            u = torch.zeros(k, dtype=torch.float64)
            u[0] = 1.0
            return u
        return diff / norm
