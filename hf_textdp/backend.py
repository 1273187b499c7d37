"""The backend layer: for each primitive the mechanisms need, the one place that picks a compiled CPU kernel
(:mod:`hf_textdp.cpu`), a Triton kernel on CUDA (:mod:`hf_textdp.gpu`) or torch.

Mechanisms import only this module and the math (docs/architecture.md; the import contract ``mechanisms ↛ cpu,
gpu`` in pyproject.toml): they ask for a result, and get ``None`` where no kernel runs, then compute it with their
own torch form. Every choice is made from the device and the CPU's flags (:mod:`hf_textdp.cpu.features`), never
from a timing; every kernel gives the torch form's numbers (exact integers, or the same float64 arithmetic up to
an ulp of a logarithm, cosine or sine where the module says so).

Primitives:

* **metric Laplace noise added to rows** (madlib and the metric mechanisms): :func:`noise_shift_runs`,
  :func:`noise_reads_rows`, :func:`metric_laplace_shift`;
* **the additive mechanisms' noise added to bounded rows** (laplace, gaussian, truncated_laplace; CPU only):
  :func:`gaussian_release`, :func:`laplace_parts`, :func:`laplace_release`;
* **the exponential sampler's integer keys** (tem, santext, santext+): :func:`int_product`, :class:`KeyKernel`
  (CPU, VNNI or AVX2), :func:`triton_runs`, :func:`cuda_int_keys`, :func:`cuda_sampler_bounds`,
  :func:`cuda_sample_tries`;
* **float64 distances of (row, row) pairs**: :func:`pair_sqdist`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from .cpu import int8_keys
from .cpu.distances import pair_sqdist
from .cpu.features import native_int8
from .cpu.noise import native_gaussian_release as gaussian_release
from .cpu.noise import native_laplace_parts as laplace_parts
from .cpu.noise import native_laplace_release as laplace_release
from .cpu.noise import native_metric_laplace_shift, noise_kernel_available
from .gpu import sampler as _gpu_sampler
from .gpu import triton_ready
from .gpu.int_scores import IntOperands, int_scores
from .gpu.noise import metric_laplace_shift as _cuda_metric_laplace_shift


__all__ = [
    "CUDA_SAMPLER_TRIES",
    "BoundTargets",
    "IntOperands",
    "KeyKernel",
    "cuda_int_keys",
    "cuda_sample_tries",
    "cuda_sampler_bounds",
    "gaussian_release",
    "int_product",
    "laplace_parts",
    "laplace_release",
    "metric_laplace_shift",
    "noise_reads_rows",
    "noise_shift_runs",
    "pair_sqdist",
    "sampler_pick",
    "triton_runs",
]

BoundTargets = int8_keys.BoundTargets

#: tries of every token that one CUDA sampler kernel runs (the rest go on in torch)
CUDA_SAMPLER_TRIES = _gpu_sampler.MAX_KERNEL_TRIES


# --------------------------------------------------------------------------- metric Laplace noise
def noise_shift_runs(device: torch.device) -> bool:
    """Whether :func:`metric_laplace_shift` may run a kernel on ``device``: the CPU (the compiled kernel, where it
    builds) or CUDA with Triton."""
    return device.type == "cpu" or triton_ready(device)


def noise_reads_rows(device: torch.device) -> bool:
    """Whether :func:`metric_laplace_shift` runs the compiled CPU kernel on ``device``, which reads the rows itself
    (so a batch needs no gathered copy of its inputs)."""
    return device.type == "cpu" and noise_kernel_available()


def metric_laplace_shift(
    x: torch.Tensor,
    k0: torch.Tensor,
    k1: torch.Tensor,
    position: torch.Tensor,
    radius: torch.Tensor,
    draw: int,
    rows: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """``fl32(x_i + r_i·G_i/‖G_i‖)`` per token i (x_i row i of ``x``, or row ``rows[i]``; G_i its normals of ``draw``
    from its keyed stream ``k0, k1, position``; r_i = ``radius[i]``), by the CPU kernel (:mod:`hf_textdp.cpu.noise`,
    which reads the rows itself) or the Triton one (:mod:`hf_textdp.gpu.noise`); ``None`` where neither runs."""
    if x.device.type == "cpu":
        return native_metric_laplace_shift(x, k0, k1, position, radius, draw, rows=rows)
    if not triton_ready(x.device):
        return None
    inputs = x if rows is None else x[rows.to(x.device)]
    return _cuda_metric_laplace_shift(inputs, k0, k1, position, radius, draw)


# --------------------------------------------------------------------------- the sampler's integer keys
def int_product(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """The exact int32 product of int8 matrices: ``torch._int_mm`` where the int8 product is native (CUDA, or a CPU
    with VNNI or AMX: :func:`~hf_textdp.cpu.features.native_int8`), else a floating-point product, exact because
    every partial sum is an integer of magnitude ≤ K·127²: fp32 below 2²⁴, float64 (below 2⁵³) above. torch
    emulates ``_int_mm`` on other CPUs, many times slower."""
    if A.device.type != "cpu" or native_int8():
        try:
            return torch._int_mm(A, B)
        except (RuntimeError, NotImplementedError):  # a backend without the int8 product
            pass
    wide = torch.float32 if A.shape[1] * 127 * 127 < 2**24 else torch.float64
    return (A.to(wide) @ B.to(wide)).to(torch.int32)


@dataclasses.dataclass(frozen=True)
class KeyKernel:
    """The sampler's keys 2·I_x·I_c − N_c by the compiled CPU kernel (:mod:`hf_textdp.cpu.int8_keys`: VNNI where the
    int8 product is native, else AVX2), for target columns packed once."""

    targets: int8_keys.PackedTargets

    @property
    def kind(self) -> str:
        """``"vnni"`` or ``"avx2"``."""
        return self.targets.kind

    @classmethod
    def build(cls, I_cols: torch.Tensor, norms: torch.Tensor) -> KeyKernel | None:
        """The kernel for columns ``I_cols`` ``[V″, d]`` int8 (V″ a multiple of 64) with norms ``norms``, or ``None``
        where none runs (no compiler or flags, native switch off, a tensor not on the CPU)."""
        if I_cols.device.type != "cpu" or not int8_keys.int8_keys_available():
            return None
        return cls(int8_keys.PackedTargets.build(I_cols, norms))

    def block_maxima(self, I_x: torch.Tensor, threads: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(each token's largest key in each block of 64 columns ``[G, blocks]``, the tokens' rows for
        :meth:`block_keys`)."""
        return int8_keys.block_key_maxima(self.targets, I_x, threads)

    def block_keys(self, token_rows: torch.Tensor, rows: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
        """``[n, 64]`` int32 keys of block ``blocks[i]`` for token ``rows[i]``."""
        return int8_keys.block_keys(self.targets, token_rows, rows, blocks)

    def sampler_bounds(
        self, bt: int8_keys.BoundTargets, I_x: torch.Tensor, token: tuple[torch.Tensor, torch.Tensor],
        law: tuple[float, float, int], threads: int,
    ) -> tuple[torch.Tensor, ...]:  # fmt: skip
        """The sampler's proposal (hot blocks, hot columns, their bounds, the blocks' bounds, cumulative weights) in
        the kernel and C (:func:`hf_textdp.cpu.int8_keys.sampler_bounds`): the tensor form's numbers bit for bit."""
        return int8_keys.sampler_bounds(self.targets, bt, I_x, token, law, threads)


def triton_runs(device: torch.device) -> bool:
    """Whether the Triton kernels run on ``device`` (CUDA with Triton, or the interpreter the tests switch on)."""
    return triton_ready(device)


def cuda_int_keys(I_x: torch.Tensor, ops: IntOperands) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(keys ``[G, V″]``, block maxima) by the Triton kernel (:mod:`hf_textdp.gpu.int_scores`), else ``None``."""
    return int_scores(I_x, ops) if triton_ready(I_x.device) else None


def cuda_sampler_bounds(*args: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The sampler's proposal from the keys of :func:`cuda_int_keys` (:func:`hf_textdp.gpu.sampler.sampler_bounds`)."""
    return _gpu_sampler.sampler_bounds(*args)  # type: ignore[no-any-return]


def cuda_sample_tries(*args: Any) -> torch.Tensor | None:
    """Every token's first :data:`CUDA_SAMPLER_TRIES` tries in one Triton kernel
    (:func:`hf_textdp.gpu.sampler.sample_tries`), or ``None`` where it does not run."""
    return _gpu_sampler.sample_tries(*args)  # type: ignore[no-any-return]


def sampler_pick(
    proposal: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    row: torch.Tensor | None,
    u: torch.Tensor,
    size: torch.Tensor,
    Vt: int,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The exponential sampler's proposed columns and their lower bounds for a round of tries, by the compiled CPU
    code (:func:`hf_textdp.cpu.int8_keys.sampler_pick`), or ``None`` where it does not run."""
    return int8_keys.sampler_pick(proposal, row, u, size, Vt)
