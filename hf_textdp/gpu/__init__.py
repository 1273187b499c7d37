"""GPU kernels (Triton): the keyed Philox uniforms, madlib's noise, the fused exact nearest-neighbour
search and the exponential sampler's scores, bound and tries.

Triton is optional: it ships with CUDA builds of PyTorch, and :func:`triton_ready` says whether the
kernels can run for a device. Every kernel has a torch or CPU twin that computes the same numbers, and
the kernels also run under Triton's interpreter (``TRITON_INTERPRET=1`` with the ``triton`` switch of
:mod:`hf_textdp.settings` at ``interpret``) on CPU tensors, which is how the tests check them on machines
without a GPU (docs/performance.md, "GPU").
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from .. import settings


__all__ = ["triton_ready", "interpreting", "on_device", "built", "bf16_operands", "lanes"]


T = TypeVar("T")


def interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter (``TRITON_INTERPRET=1``: CPU tensors, NumPy)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.cache
def _triton_importable() -> bool:
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:  # noqa: BLE001 - a missing or broken install means "no kernels"
        return False
    return True


def triton_ready(device: torch.device | str) -> bool:
    """Whether the Triton kernels run for tensors on ``device``.

    CUDA devices need Triton (the ``triton`` switch at ``0`` turns the kernels off, for comparisons). CPU tensors
    run them only under Triton's interpreter and when the switch says ``interpret`` (the
    tests): someone debugging their own kernels with ``TRITON_INTERPRET=1`` keeps the package's fast CPU
    path, and its GPU path falls back to torch operations.
    """
    mode = settings.triton_mode()
    if mode == "0":
        return False
    kind = torch.device(device).type
    if interpreting():
        return kind == "cpu" and mode == "interpret" and _triton_importable()
    return kind == "cuda" and _triton_importable()  # a CPU process never imports Triton


def on_device(device: torch.device) -> Any:
    """The context that makes ``device`` current for a launch: Triton launches on the current CUDA device,
    which need not be the tensors' (``cuda:1`` while ``cuda:0`` is current)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def built(cache: dict[bool, T], build: Callable[[], T]) -> T:
    """``build()``'s kernels, made once per mode: the interpreter's kernels are other objects than compiled ones."""
    mode = interpreting()
    if mode not in cache:
        cache[mode] = build()
    return cache[mode]


def bf16_operands() -> torch.dtype:
    """The dtype of bf16 matrix operands handed to a kernel: bf16, or, under the interpreter (which cannot load
    bf16), fp32 tensors holding bf16 values, whose products are as exact."""
    return torch.float32 if interpreting() else torch.bfloat16


def lanes(n: int) -> int:
    """The block width a kernel needs for ``n`` elements: the power of two ≥ n, at least 16."""
    return 1 << max(4, (n - 1).bit_length())
