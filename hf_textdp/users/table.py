"""What the counting pass learned, as the release reads it (docs/mechanisms/users.md §4): each user's level or
kept-row threshold, and which row is charged for each of a user's sensitive strings under
``sensitive["consistent"] = "user"``.

Memory: sorted numpy arrays, 26 bytes a user (hash 8, rows 8, level 2, threshold 8) and 16 bytes a distinct
(user, sensitive string) pair under ``consistent="user"``; a million users take 26 MB. The table travels with a
pickled :class:`~hf_textdp.Privatizer` to ``num_proc`` workers and Ray actors; it is never written to an output.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidParameterError


__all__ = ["UserTable", "pair_keys"]


def pair_keys(users: np.ndarray, digests: Sequence[bytes]) -> np.ndarray:
    """A 64-bit key of each (user, sensitive string) pair (uint64)."""
    out = np.empty(len(digests), dtype=np.uint64)
    for i, (u, d) in enumerate(zip(users.tolist(), digests, strict=True)):
        h = hashlib.blake2b(int(u).to_bytes(8, "little") + d, digest_size=8, person=b"hfdp-pair")
        out[i] = int.from_bytes(h.digest(), "little")
    return out


def _lookup(sorted_keys: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(found, index) of each of ``keys`` in ``sorted_keys`` (index 0 where not found)."""
    if not sorted_keys.size:
        return np.zeros(keys.size, dtype=bool), np.zeros(keys.size, dtype=np.int64)
    idx = np.minimum(np.searchsorted(sorted_keys, keys), sorted_keys.size - 1)
    return sorted_keys[idx] == keys, idx


@dataclass
class UserTable:
    """Per-user figures from the counting pass, sorted by user hash.

    Attributes:
        users (`np.ndarray` `[U]` uint64): the users' hashes, sorted.
        rows (`np.ndarray` `[U]` int64): rows seen of each user.
        level (`np.ndarray` `[U]` int16): each user's level (allocation.md: ε·2^(−level/8)); 0 without a budget.
        threshold (`np.ndarray` `[U]` uint64, *optional*): ``bound="rows"``: a row is kept iff its priority is at
            most this (0: none kept).
        pairs (`np.ndarray` `[P]` uint64, *optional*): ``consistent="user"``: the (user, string) pairs, sorted.
        first_row (`np.ndarray` `[P]` int64, *optional*): the row id charged for each pair (its first kept row).
    """

    users: np.ndarray
    rows: np.ndarray
    level: np.ndarray
    threshold: np.ndarray | None = None
    pairs: np.ndarray | None = None
    first_row: np.ndarray | None = None

    def index(self, keys: np.ndarray, row_ids: Sequence[int] | None = None) -> np.ndarray:
        """Each key's index in the table.

        Raises:
            InvalidParameterError: a user the counting pass did not see (the row is named, never the user).
        """
        ok, idx = _lookup(self.users, keys)
        if not ok.all():
            bad = int(np.flatnonzero(~ok)[0])
            where = f"row {int(row_ids[bad])}" if row_ids is not None else f"row {bad} of the batch"
            raise InvalidParameterError(
                f"{where}: its user was not in the counting pass (Privatizer.fit_users); fit the counts on the whole "
                "split that is released (privatize_dataset does it)."
            )
        return idx

    def charged(self, keys: np.ndarray, row_ids: np.ndarray) -> np.ndarray:
        """``consistent="user"``: whether each (pair key, row id) is the pair's charged occurrence."""
        assert self.pairs is not None and self.first_row is not None
        ok, idx = _lookup(self.pairs, keys)
        return np.asarray(ok & (self.first_row[idx] == row_ids), dtype=bool)

    def to_state(self) -> dict[str, Any]:
        """The picklable form (numpy arrays as they are)."""
        return {k: getattr(self, k) for k in ("users", "rows", "level", "threshold", "pairs", "first_row")}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> UserTable:
        if not isinstance(state, dict) or "users" not in state:
            raise InvalidParameterError("user counts: not a UserTable state.")
        return cls(**state)
