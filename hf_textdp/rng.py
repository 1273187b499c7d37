"""Per-row random generators (spec §1.6).

Row r's generator is derived from ``(seed, split, stream, row_id)`` by SHA-256, so a seeded output
never depends on batch size, ``num_proc``, block layout or engine. Without a seed every row draws
fresh OS entropy. The seed is a secret key: whoever knows it can recompute the noise.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import torch

from .errors import InvalidParameterError, ParameterTypeError


__all__ = ["derive_row_seed", "row_generator", "fresh_seed", "validate_seed", "validate_split", "validate_stream"]

_KEY_PREFIX = b"hf_textdp/rng/v1\x00"
_U64 = 2**64
_I63 = 2**63


def validate_seed(seed: Any, name: str = "seed") -> int | None:
    """Check that ``seed`` is ``None`` or an int in [0, 2**64); return it."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ParameterTypeError(f"{name} must be an int in [0, 2**64) or None, got {type(seed).__name__}.")
    if not 0 <= seed < _U64:
        raise InvalidParameterError(f"{name} must be an int in [0, 2**64), got a value out of range.")
    return int(seed)


def validate_split(split: Any) -> str:
    """Check that the split name (part of the noise key) is a str; return it."""
    if not isinstance(split, str):
        raise ParameterTypeError(f"split must be a str, got {type(split).__name__}.")
    return split


def validate_stream(stream: Any) -> int:
    """Check that the noise stream (0, or epoch + 1 for collators) is an int in [0, 2**63); return it."""
    if isinstance(stream, bool) or not isinstance(stream, int) or not 0 <= stream < _I63:
        raise InvalidParameterError(f"stream must be an int in [0, 2**63), got {stream!r}.")
    return stream


def derive_row_seed(seed: int, row_id: int, split: str = "", stream: int = 0) -> int:
    """Derive the 63-bit seed of one row's generator (spec §1.6).

    Args:
        seed (`int`): the secret seed, 0 <= seed < 2**64.
        row_id (`int`): the row's index in its split, or its ``id_column`` value, 0 <= row_id < 2**63.
        split (`str`, defaults to `""`): the split name, so two splits never share noise.
        stream (`int`, defaults to `0`): 0 for one-time privatization, epoch + 1 for collators.

    Example:

    >>> derive_row_seed(42, 17, "train", 0)
    3880023052778407084
    """
    validate_seed(seed)
    if isinstance(row_id, bool) or not isinstance(row_id, int) or not 0 <= row_id < _I63:
        raise InvalidParameterError(f"row_id must be an int in [0, 2**63), got {row_id!r}.")
    validate_stream(stream)
    validate_split(split)
    split_utf8 = split.encode("utf-8")
    key = (
        _KEY_PREFIX
        + seed.to_bytes(8, "little")
        + stream.to_bytes(8, "little")
        + len(split_utf8).to_bytes(4, "little")
        + split_utf8
        + row_id.to_bytes(8, "little")
    )
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little") & (_I63 - 1)


def fresh_seed() -> int:
    """63 bits of OS entropy (used per row when no seed is given)."""
    return int.from_bytes(os.urandom(8), "little") & (_I63 - 1)


def row_generator(
    seed: int | None, row_id: int, split: str = "", stream: int = 0, device: str | torch.device = "cpu"
) -> torch.Generator:
    """The generator of one row: derived from the seed, or fresh OS entropy when ``seed`` is None."""
    g = torch.Generator(device=device)
    g.manual_seed(fresh_seed() if seed is None else derive_row_seed(seed, row_id, split, stream))
    return g
