"""Directed rounding of float64 values to fp32, for bounds that must not shrink."""

from __future__ import annotations

import math

import torch


__all__ = ["round_up_fp32"]


def round_up_fp32(x: torch.Tensor) -> torch.Tensor:
    """The smallest fp32 number ≥ x (float64 in, fp32 out; −inf and +inf map to themselves).

    Example:

    >>> float(round_up_fp32(torch.tensor([0.1], dtype=torch.float64))[0]) >= 0.1
    True
    """
    y = x.float()
    return torch.where(y.double() < x, torch.nextafter(y, torch.full_like(y, math.inf)), y)
