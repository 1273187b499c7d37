"""Keys of memoised public constants (hf_textdp.memo): the hash of a matrix, kept while the matrix is unchanged."""

from __future__ import annotations

import gc
import hashlib

import numpy as np
import torch

from hf_textdp import memo
from hf_textdp.memo import matrix_key


def reference_key(prefix: bytes, E: torch.Tensor, *more: bytes) -> str:
    h = hashlib.sha256(prefix)
    h.update(np.asarray(E.shape, dtype="<i8").tobytes())
    h.update(E.detach().cpu().numpy().astype("<f4").tobytes())
    for m in more:
        h.update(m)
    return h.hexdigest()


def test_a_kept_key_follows_every_change_of_the_matrix() -> None:
    E = torch.randn(50, 8, generator=torch.Generator().manual_seed(0))
    first = matrix_key(b"p\x00", E, b"w")
    assert first == reference_key(b"p\x00", E, b"w") == matrix_key(b"p\x00", E, b"w")  # kept, and the same
    assert matrix_key(b"q\x00", E, b"w") == reference_key(b"q\x00", E, b"w")  # another prefix: its own key
    assert matrix_key(b"p\x00", E) == reference_key(b"p\x00", E)  # … and other extra parts
    E[3, 1] += 1.0  # in place through E
    assert matrix_key(b"p\x00", E, b"w") == reference_key(b"p\x00", E, b"w") != first
    before = matrix_key(b"p\x00", E, b"w")
    E[:5].mul_(2.0)  # in place through a view of its storage
    assert matrix_key(b"p\x00", E, b"w") == reference_key(b"p\x00", E, b"w") != before
    T = E.t()  # another tensor over the same storage: its own layout, its own key
    assert matrix_key(b"p\x00", T) == reference_key(b"p\x00", T)
    D = E.double()  # hashed as its fp32 rounding, as the reference
    assert matrix_key(b"p\x00", D) == reference_key(b"p\x00", D)


def test_keys_are_dropped_with_their_matrix_and_not_kept_without_a_version() -> None:
    E = torch.randn(20, 4)
    matrix_key(b"p", E)
    ident = id(E)
    assert ident in memo._KEYS
    del E
    gc.collect()
    assert ident not in memo._KEYS  # no stale entry for a reused id
    with torch.inference_mode():
        inference = torch.randn(6, 3)  # no version counter: hashed every time, never kept
    assert matrix_key(b"p", inference) == reference_key(b"p", inference)
    assert id(inference) not in memo._KEYS
