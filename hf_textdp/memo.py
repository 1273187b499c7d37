"""Memoised public constants, with an optional persistent :class:`Store` injected by the I/O layer.

Math modules (``scale``, ``bounding``, ``mechanisms.projection``) key each derived value by the SHA-256
of the public inputs it depends on and keep it in a process-wide dict; a store (the disk cache of
:mod:`hf_textdp.io.cache`, carried by the embedding space) keeps JSON-ready dicts between processes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import numpy as np
import torch


__all__ = ["Store", "matrix_key", "memoised"]

T = TypeVar("T")


class Store(Protocol):
    """A persistent key → JSON-object store, in namespaces ``kind`` (``"scale"``, ``"sensitivity"``, …)."""

    def load(self, kind: str, key: str) -> dict[str, Any] | None:
        """The stored object, or ``None`` when absent or unreadable."""

    def save(self, kind: str, key: str, value: dict[str, Any]) -> None:
        """Store ``value`` (best effort: a failed write is not an error)."""


def matrix_key(prefix: bytes, E: torch.Tensor, *more: bytes) -> str:
    """SHA-256 hex of ``prefix``, E's shape and fp32 bytes (little-endian), then ``more``: a derived value's key."""
    h = hashlib.sha256(prefix)
    h.update(np.asarray(E.shape, dtype="<i8").tobytes())
    h.update(E.detach().cpu().numpy().astype("<f4").tobytes())
    for m in more:
        h.update(m)
    return h.hexdigest()


def memoised(
    memo: dict[str, T],
    store: Store | None,
    kind: str,
    key: str,
    compute: Callable[[], T],
    decode: Callable[[dict[str, Any]], T],
    encode: Callable[[T], dict[str, Any]],
) -> T:
    """``memo[key]``, else ``store``'s copy, else ``compute()`` (then kept in both)."""
    if key in memo:
        return memo[key]
    raw = store.load(kind, key) if store is not None else None
    if raw is not None:
        try:
            value = decode(raw)
        except (ValueError, TypeError, KeyError, IndexError):
            pass
        else:
            memo[key] = value
            return value
    value = compute()
    memo[key] = value
    if store is not None:
        store.save(kind, key, encode(value))
    return value
