"""The keys of per-person work (docs/mechanisms/users.md §5): user ids hashed to 64 bits, each row's priority for
``bound="rows"``, and each consistent pseudonym's Philox key.

User ids are hashed without a key (the counting pass and the release must agree, in every process): the hashes
stay in memory and are never written. Priorities and pseudonym keys are keyed by the secret seed (or, without
one, by a secret drawn once per :class:`~hf_textdp.Privatizer`): whoever lacks it can neither predict which rows
are kept nor recompute a pseudonym's draw.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InvalidRowError


__all__ = ["entity_digest", "entity_keys", "row_priorities", "user_keys"]

_I63 = 2**63
_PERSON_USER = b"hfdp-user-id"
_PERSON_ROWS = b"hfdp-row-prio"
_PERSON_ENTITY = b"hfdp-entity"


def _row_name(i: int, row_ids: Sequence[int] | None) -> str:
    return f"row {i} of the batch" if row_ids is None else f"row {int(row_ids[i])}"


def user_keys(values: Sequence[Any], column: str, row_ids: Sequence[int] | None = None) -> np.ndarray:
    """Each row's user as a 64-bit hash (uint64): an int and a str are told apart (``7`` is not ``"7"``).

    Raises:
        InvalidRowError: a user that is null, a bool or neither an int nor a str (the row is named, never the value).
    """
    out = np.empty(len(values), dtype=np.uint64)
    for i, v in enumerate(values):
        if isinstance(v, str):
            data = b"s" + v.encode("utf-8")
        elif isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
            data = b"i" + str(int(v)).encode("ascii")
        else:
            raise InvalidRowError(
                f"{_row_name(i, row_ids)}: user column {column!r} must hold an int or a str, got {type(v).__name__}."
            )
        out[i] = int.from_bytes(hashlib.blake2b(data, digest_size=8, person=_PERSON_USER).digest(), "little")
    return out


def _secret_key(secret: int, split: str) -> bytes:
    """The blake2b key of a secret and a split (≤ 64 bytes: the split enters hashed)."""
    return secret.to_bytes(8, "little") + hashlib.blake2b(split.encode("utf-8"), digest_size=32).digest()


def row_priorities(secret: int, split: str, row_ids: Sequence[int]) -> np.ndarray:
    """Each row's priority (uint64, never 0) for ``bound="rows"``: a keyed hash of the row id, so a user's rows are
    kept in an order that is random to whoever lacks the secret and the same in every pass and process."""
    key = _secret_key(secret, split)
    out = np.empty(len(row_ids), dtype=np.uint64)
    for i, r in enumerate(row_ids):
        h = hashlib.blake2b(int(r).to_bytes(8, "little"), digest_size=8, key=key, person=_PERSON_ROWS)
        out[i] = int.from_bytes(h.digest(), "little") | 1
    return out


def entity_digest(ids: np.ndarray) -> bytes:
    """A sensitive string's identity: a 16-byte hash of its token ids (the tokenizer's normalised form)."""
    return hashlib.blake2b(np.ascontiguousarray(ids, dtype=np.int64).tobytes(), digest_size=16).digest()


def entity_keys(secret: int, split: str, stream: int, scopes: Sequence[int], digests: Sequence[bytes]) -> list[int]:
    """The Philox key (63 bits) of each pseudonym: a keyed hash of (stream, scope, digest), where the scope is the
    user's hash (``consistent="user"``) or the row id (``"row"``). Never equal to a row key but by chance."""
    key = _secret_key(secret, split)
    prefix = int(stream).to_bytes(8, "little")
    out = []
    for scope, digest in zip(scopes, digests, strict=True):
        data = prefix + int(scope).to_bytes(8, "little") + digest
        h = hashlib.blake2b(data, digest_size=8, key=key, person=_PERSON_ENTITY)
        out.append(int.from_bytes(h.digest(), "little") & (_I63 - 1))
    return out
