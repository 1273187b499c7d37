"""Memoised public constants, with an optional persistent :class:`Store` injected by the I/O layer.

Math modules (``scale``, ``bounding``, ``mechanisms.projection``) key each derived value by the SHA-256
of the public inputs it depends on and keep it in a process-wide dict; a store (the disk cache of
:mod:`hf_textdp.io.cache`, carried by the embedding space) keeps JSON-ready dicts between processes.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import numpy as np
import torch


__all__ = ["Store", "fp32_bytes", "matrix_key", "memoised"]

T = TypeVar("T")


class Store(Protocol):
    """A persistent key → JSON-object store, in namespaces ``kind`` (``"scale"``, ``"sensitivity"``, …)."""

    def load(self, kind: str, key: str) -> dict[str, Any] | None:
        """The stored object, or ``None`` when absent or unreadable."""

    def save(self, kind: str, key: str, value: dict[str, Any]) -> None:
        """Store ``value`` (best effort: a failed write is not an error)."""


#: id(E) → (a weak reference to E, its layout and version when hashed, {(prefix, more): key})
_KEYS: dict[int, tuple[weakref.ref[torch.Tensor], tuple[Any, ...], dict[tuple[bytes, bytes], str]]] = {}


def _layout(E: torch.Tensor) -> tuple[Any, ...] | None:
    """What a key of E depends on besides its values, and E's version counter (bumped by every in-place write,
    through E or through any view sharing its storage); ``None`` for a tensor without one (inference mode)."""
    try:
        version = E._version
    except RuntimeError:
        return None
    return (version, E.data_ptr(), tuple(E.shape), E.stride(), E.dtype, str(E.device))


def fp32_bytes(E: torch.Tensor) -> memoryview:
    """E's values as little-endian fp32 in C order, without a copy where E already is one (for hashing)."""
    return np.ascontiguousarray(E.detach().cpu().numpy(), dtype="<f4").data


def matrix_key(prefix: bytes, E: torch.Tensor, *more: bytes) -> str:
    """SHA-256 hex of ``prefix``, E's shape and fp32 bytes (little-endian), then ``more``: a derived value's key.

    Hashing a vocabulary's matrix takes ~40 ms and a run asks for the same keys several times (the claim, the
    details and the report of each class), so a key is kept while E lives unchanged: the same object, storage,
    layout and version counter. Every torch write bumps that counter; writes that bypass it (``E.data[...] =``,
    or a numpy array sharing E's memory) are not made to the matrices keyed here, which are public constants
    of their space.
    """
    tag, layout = (prefix, b"".join(more)), _layout(E)
    entry = _KEYS.get(id(E))
    if entry is not None and (entry[0]() is not E or layout is None or entry[1] != layout):
        entry = None
    if entry is not None and tag in entry[2]:
        return entry[2][tag]
    h = hashlib.sha256(prefix)
    h.update(np.asarray(E.shape, dtype="<i8").tobytes())
    h.update(fp32_bytes(E))
    for m in more:
        h.update(m)
    key = h.hexdigest()
    if layout is None:
        return key
    if entry is None:
        ident = id(E)
        entry = (weakref.ref(E, lambda _: _KEYS.pop(ident, None)), layout, {})
        _KEYS[ident] = entry
    entry[2][tag] = key
    return key


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
