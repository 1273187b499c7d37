"""Box–Muller normals and madlib's noisy vectors from the Philox stream by a compiled kernel (``kernels/philox.c``).

In tensor operations a normal costs a pass for the uniforms, then a logarithm, a square root, a cosine
and a sine, each a pass over a float64 ``[tokens, d]`` tensor, and madlib adds a norm, a scaling, a sum
and a rounding to fp32 (a dozen passes in all). The kernel draws a token's normals in registers and,
for madlib, writes only the fp32 sums. Its logarithm, cosine and sine are its own (vectorised
polynomials within a few ulp, docs/mechanisms/randomness.md §4): the law is Box–Muller's on the same
exact uniforms; the values may differ from the torch form's by an ulp, and so may a released id at an
exact float64 near-tie.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

from ..utils.native import check_index_range, load_kernel, native_enabled, run_team


__all__ = [
    "box_muller", "native_gaussian_release", "native_laplace_parts", "native_laplace_release", "native_normals",
    "native_metric_laplace_shift", "native_uniforms", "noise_kernel_available",
]  # fmt: skip

#: values (normals or uniforms) per thread below which one call on one thread is faster than splitting
_VALUES_PER_THREAD = 1 << 15


@functools.cache
def _lib() -> Any:
    lib = load_kernel("philox", openmp=True)
    if lib is not None:
        p, i = ctypes.c_void_p, ctypes.c_int64
        lib.philox_uniforms.argtypes = [p, p, p, p, i, i, i, i, i, i, i, p]
        lib.philox_uniforms.restype = None
        lib.philox_normals.argtypes = [p, p, p, p, i, i, i, i, i, i, i, p]
        lib.philox_normals.restype = None
        lib.metric_laplace_shift.argtypes = [p, p, p, i, p, p, p, i, i, i, i, i, p]
        lib.metric_laplace_shift.restype = ctypes.c_int
        lib.box_muller.argtypes = [p, p, i, p]
        lib.box_muller.restype = None
        lib.laplace_parts.argtypes = [p, p, p, i, i, ctypes.c_double, i, i, i, p, p]
        lib.laplace_parts.restype = None
        lib.laplace_release.argtypes = [p, p, ctypes.c_double, i, p, p, p, i, i, i, p]
        lib.laplace_release.restype = ctypes.c_int
        lib.gaussian_release.argtypes = [p, p, p, i, ctypes.c_double, p, p, p, i, i, i, i, p]
        lib.gaussian_release.restype = ctypes.c_int
    return lib


def _run(lib: Any, call: Any, n: int, per_row: int) -> None:
    """``call(lo, hi, threads)`` over rows ``0 … n``: on the OpenMP team (torch's threads) where the kernel has one,
    else on Python threads; one thread below :data:`_VALUES_PER_THREAD` values a thread."""
    parts = max(1, min(torch.get_num_threads(), n * per_row // _VALUES_PER_THREAD))
    run_team(call, n, parts, openmp=bool(lib.philox_openmp()))


def _checked_rows(lib: Any, fn: Any, args: tuple[Any, ...], out: torch.Tensor) -> torch.Tensor | None:
    """``fn(*args, i0, i1, team, out)`` over the rows of ``out`` ``[n, k]`` by :func:`_run`: ``out``, or ``None`` where
    a part's buffer could not be allocated (its rows are then not written)."""
    failed: list[int] = []

    def call(i0: int, i1: int, team: int) -> None:
        if fn(*args, i0, i1, team, out.data_ptr()) != 0:
            failed.append(i0)

    _run(lib, call, out.shape[0], out.shape[1])
    return None if failed else out


def noise_kernel_available() -> bool:
    """Whether the kernel runs here: a C compiler and the native switch on (:mod:`hf_textdp.settings`)."""
    return native_enabled() and _lib() is not None


def box_muller(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor | None:
    """The kernel's Box–Muller transform of float64 uniforms ``u``, ``v`` ``[n]`` (on (0, 1)): ``[n, 2]``, the pairs
    (r cos 2πv, r sin 2πv) with r = √(−2 ln u); ``None`` where the kernel does not run. For the tests."""
    if not native_enabled() or (lib := _lib()) is None:
        return None
    uc, vc = u.to(torch.float64).contiguous(), v.to(torch.float64).contiguous()
    z = torch.empty((uc.numel(), 2), dtype=torch.float64)
    lib.box_muller(uc.data_ptr(), vc.data_ptr(), uc.numel(), z.data_ptr())
    return z


def _keys(k0: torch.Tensor, k1: torch.Tensor, position: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(t.to(torch.int64).contiguous() for t in (k0, k1, position))


def _extra(extra: int | torch.Tensor) -> tuple[torch.Tensor, int]:
    """The 4th counter word: per token (stride 1) or one for all (stride 0)."""
    if isinstance(extra, torch.Tensor):
        return extra.to("cpu", torch.int64).contiguous(), 1
    return torch.tensor([int(extra)], dtype=torch.int64), 0


def _draw(
    name: str,
    k0: torch.Tensor,
    k1: torch.Tensor,
    position: torch.Tensor,
    draw: int,
    blocks: int,
    extra: int | torch.Tensor,
    start: int,
) -> torch.Tensor | None:
    """``[N, 2·blocks]`` float64 values of blocks ``start … start + blocks − 1`` of ``draw`` per token by the
    kernel's ``name`` (``philox_uniforms`` or ``philox_normals``), or ``None`` where the kernel does not run (no
    compiler, native switch off, another device)."""
    if position.device.type != "cpu" or not native_enabled() or (lib := _lib()) is None:
        return None
    N = int(position.shape[0])
    out = torch.empty((N, 2 * blocks), dtype=torch.float64)
    if N == 0 or blocks == 0:
        return out
    k0, k1, pos = _keys(k0, k1, position)
    ext, stride = _extra(extra)
    args = (k0.data_ptr(), k1.data_ptr(), pos.data_ptr(), ext.data_ptr(), stride, int(draw), int(start), blocks)
    fn = getattr(lib, name)
    _run(lib, lambda i0, i1, team: fn(*args, i0, i1, team, out.data_ptr()), N, 2 * blocks)
    return out


def native_uniforms(
    k0: torch.Tensor,
    k1: torch.Tensor,
    position: torch.Tensor,
    draw: int,
    blocks: int,
    extra: int | torch.Tensor,
    start: int,
) -> torch.Tensor | None:
    """The uniforms of :func:`_draw` (those of the tensor form in :mod:`hf_textdp.rng`, bit for bit)."""
    return _draw("philox_uniforms", k0, k1, position, draw, blocks, extra, start)


def native_normals(
    k0: torch.Tensor, k1: torch.Tensor, position: torch.Tensor, draw: int, blocks: int, extra: int | torch.Tensor = 0
) -> torch.Tensor | None:
    """The Box–Muller normals of :func:`_draw` from block 0 (normals 2j, 2j + 1 from the uniforms of block j)."""
    return _draw("philox_normals", k0, k1, position, draw, blocks, extra, 0)


def native_metric_laplace_shift(
    x: torch.Tensor,
    k0: torch.Tensor,
    k1: torch.Tensor,
    position: torch.Tensor,
    radius: torch.Tensor,
    draw: int,
    rows: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """``[n, d]`` fp32: fl32(x_i + r_i·G_i/‖G_i‖) per token i, G_i its first d normals of ``draw`` (those of
    :func:`native_normals`), r ``radius`` (float64, already scaled); ``None`` where the kernel does not run.

    ``x`` is fp32 or float64 ``[n, d]``, or with ``rows`` (``[n]`` int64) a matrix whose row ``rows[i]`` is
    token i's input; the sum is taken in float64 and rounded once to fp32.
    """
    if x.device.type != "cpu" or not native_enabled() or (lib := _lib()) is None:
        return None
    d = x.shape[1]
    n = x.shape[0] if rows is None else int(rows.numel())
    out = torch.empty((n, d), dtype=torch.float32)
    if n == 0 or d == 0:
        return out
    f64 = x.dtype == torch.float64
    xc = (x if f64 else x.to(torch.float32)).contiguous()
    idx = None if rows is None else rows.to("cpu", torch.int64).contiguous()
    if idx is not None:
        check_index_range(idx, x.shape[0], "rows")
    k0, k1, pos = _keys(k0, k1, position)
    r = radius.to(torch.float64).contiguous()
    args = (
        k0.data_ptr(), k1.data_ptr(), pos.data_ptr(), int(draw), r.data_ptr(), xc.data_ptr(),
        None if idx is None else idx.data_ptr(), int(f64), d,
    )  # fmt: skip
    return _checked_rows(lib, lib.metric_laplace_shift, args, out)


def _rows_args(x: torch.Tensor, factor: torch.Tensor | None, rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """x fp32 ``[V, k]``, the per-row factors float64 ``[V]`` (or none) and ``rows`` int64, contiguous and checked."""
    if x.dtype != torch.float32 or (factor is not None and factor.dtype != torch.float64):
        raise TypeError("x must be fp32 and factor float64.")
    idx = rows.to("cpu", torch.int64).contiguous()
    check_index_range(idx, x.shape[0], "rows")
    f = () if factor is None else (factor.contiguous(),)
    return (x.contiguous(), idx, *f)


def native_laplace_parts(
    k0: torch.Tensor, k1: torch.Tensor, position: torch.Tensor, draw: int, k: int, mult: float
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(w, neg) ``[n, k]``: w = |2u − 1|·mult (float64) and neg = (u < ½) (uint8) from each token's uniforms
    0 … k − 1 of ``draw`` (those of :func:`native_uniforms`); ``None`` where the kernel does not run. One thread:
    the caller runs it on chunks whose values stay in cache."""
    if position.device.type != "cpu" or not native_enabled() or (lib := _lib()) is None:
        return None
    n = int(position.shape[0])
    w = torch.empty((n, k), dtype=torch.float64)
    neg = torch.empty((n, k), dtype=torch.uint8)
    if n and k:
        a, b, c = _keys(k0, k1, position)
        lib.laplace_parts(a.data_ptr(), b.data_ptr(), c.data_ptr(), int(draw), k, float(mult), 0, n, 1,
                          w.data_ptr(), neg.data_ptr())  # fmt: skip
    return w, neg


def native_laplace_release(
    L: torch.Tensor,
    neg: torch.Tensor,
    scale: float,
    divide: bool,
    x: torch.Tensor,
    factor: torch.Tensor | None,
    rows: torch.Tensor,
    out: torch.Tensor,
) -> bool:
    """Writes ``out[i] = fl32(x[rows[i]]·factor[rows[i]] + z_i)`` (no factor: ``x[rows[i]]``), z_ij = ±(L_ij·scale)
    (``divide``: ±(L_ij/scale)), + where ``neg``; L and neg ``[n, k]`` contiguous from :func:`native_laplace_parts`.
    ``False`` where the kernel does not run or its buffer could not be allocated (then ``out`` is not all written).
    """
    if not native_enabled() or (lib := _lib()) is None:
        return False
    n, k = L.shape
    if n == 0 or k == 0:
        return True
    xc, idx, *f = _rows_args(x, factor, rows)
    if not (L.is_contiguous() and neg.is_contiguous() and out.is_contiguous() and out.shape == (n, k)):
        raise ValueError("L, neg and out must be contiguous [n, k].")
    fp = f[0].data_ptr() if f else None
    rc = lib.laplace_release(L.data_ptr(), neg.data_ptr(), float(scale), int(divide), xc.data_ptr(), fp,
                             idx.data_ptr(), k, 0, n, out.data_ptr())  # fmt: skip
    return bool(rc == 0)


def native_gaussian_release(
    k0: torch.Tensor,
    k1: torch.Tensor,
    position: torch.Tensor,
    draw: int,
    sigma: float,
    x: torch.Tensor,
    factor: torch.Tensor | None,
    rows: torch.Tensor,
) -> torch.Tensor | None:
    """``[n, k]`` fp32: fl32(x[rows[i]]·factor[rows[i]] + G_i·σ) per token i, G_i its first k normals of ``draw``
    (those of :func:`native_normals`); ``None`` where the kernel does not run."""
    if position.device.type != "cpu" or not native_enabled() or (lib := _lib()) is None:
        return None
    n, k = int(rows.numel()), int(x.shape[1])
    out = torch.empty((n, k), dtype=torch.float32)
    if n == 0 or k == 0:
        return out
    xc, idx, *f = _rows_args(x, factor, rows)
    a, b, c = _keys(k0, k1, position)
    args = (a.data_ptr(), b.data_ptr(), c.data_ptr(), int(draw), float(sigma), xc.data_ptr(),
            f[0].data_ptr() if f else None, idx.data_ptr(), k)  # fmt: skip
    return _checked_rows(lib, lib.gaussian_release, args, out)
