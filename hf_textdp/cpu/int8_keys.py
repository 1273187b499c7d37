"""The exponential sampler's integer keys on CPUs with AVX-512 VNNI (``kernels/int8_keys.c``) or AVX2
(``kernels/int8_keys_avx2.c``).

:class:`~hf_textdp.mechanisms.exponential.ExponentialSampler` bounds its proposal with the exact integer keys
2·I_x·I_c − N_c of a token against every target column, and from them takes each block's largest key and
the keys of a few hot blocks. In tensor operations that is an int32 ``[tokens, columns]`` product, a pass
for the keys and a pass for the block maxima. The kernel computes the keys in registers and writes only
the block maxima; the hot blocks' keys are computed again. All of it is exact integer arithmetic, so the
numbers, and the sampler's outputs, are the same bit for bit. :func:`sampler_bounds` goes on, in the same
threads, to the proposal's float64 bounds and weights (``kernels/int8_bounds.h``), the tensor form's numbers.

Which kernel runs follows the CPU's flags (:mod:`hf_textdp.cpu.features`): VNNI's ``VPDPBUSD`` on four int8
coordinates a step where the int8 product is native, else AVX2's ``VPMADDWD`` on two coordinates widened to
int16 (exact too); torch's ``_int_mm`` is emulated on a CPU without VNNI and is never the fallback there.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import torch

from ..utils.native import load_kernel, native_enabled, run_team
from .features import int8_kernel_kind


__all__ = [
    "NB",
    "BoundTargets",
    "PackedTargets",
    "int8_keys_available",
    "block_key_maxima",
    "block_keys",
    "sampler_bounds",
    "sampler_pick",
]

#: target columns per block (the sampler's own block)
NB = 64
#: bytes of packed tokens per pass of the kernel (they stay in a core's L2 cache while all columns go by)
_PASS_BYTES = 384 * 1024
#: tiles per thread below which one thread is faster
_MIN_TILES_PER_THREAD = 4


#: the kernels: VNNI (four int8 coordinates a word) and AVX2 (two int16 coordinates a word)
_SOURCES = {"vnni": "int8_keys", "avx2": "int8_keys_avx2"}


@functools.cache
def _load(kind: str) -> Any:
    lib = load_kernel(_SOURCES[kind], openmp=True)
    if lib is None or lib.int8_keys_tile() <= 0:
        return None
    p, i = ctypes.c_void_p, ctypes.c_int64
    lib.int8_block_maxima.argtypes = [p, p, p, p, i, i, i, i, i, i, p]
    lib.int8_block_maxima.restype = None
    lib.int8_block_keys.argtypes = [p, p, p, p, p, p, i, i, p]
    lib.int8_block_keys.restype = None
    lib.int8_sampler_bounds.argtypes = [p, p, p, p, p, i, i, i, i, i, i, p, p]
    lib.int8_sampler_bounds.restype = None
    lib.int8_sampler_bounds_step.argtypes = [p, i, i, i, i]
    lib.int8_sampler_bounds_step.restype = None
    lib.int8_sampler_pick.argtypes = [p, p, p, i, i, p, p]
    lib.int8_sampler_pick.restype = None
    return lib


def _kind() -> str | None:
    """The kernel for this CPU's flags: ``"vnni"`` where the int8 product is native and that kernel builds, else
    ``"avx2"`` with AVX2 and FMA, else ``None``."""
    return int8_kernel_kind(_load)


def _lib(kind: str | None = None) -> Any:
    """The compiled kernel of ``kind`` (default: this CPU's, :func:`_kind`), typed for ctypes, or ``None``."""
    kind = kind or _kind()
    return None if kind is None else _load(kind)


def int8_keys_available() -> bool:
    """Whether a kernel runs here: a C compiler, AVX-512 VNNI or AVX2, and the native switch on (settings.py)."""
    return native_enabled() and _kind() is not None


@dataclasses.dataclass(frozen=True)
class PackedTargets:
    """Target columns packed for the ``kind`` kernel: ``e`` ``[blocks, K4, NB]`` words of four int8 coordinates
    (VNNI) or ``[blocks, K2, NB]`` words of two int16 ones (AVX2), the accumulators' start (−128·Σ_j I_c,j for VNNI,
    whose tokens are offset by 128; zero for AVX2) and the norms N_c (int32, ``[blocks·NB]``)."""

    e: torch.Tensor
    init: torch.Tensor
    norms: torch.Tensor
    d: int
    kind: str = "vnni"

    @property
    def K4(self) -> int:
        return self.e.shape[1]

    @property
    def blocks(self) -> int:
        return self.e.shape[0]

    @classmethod
    def build(cls, I_cols: torch.Tensor, norms: torch.Tensor, kind: str | None = None) -> PackedTargets:
        """``I_cols`` ``[V″, d]`` int8 (V″ a multiple of NB, padding columns zero), ``norms`` ``[V″]`` int32, for the
        ``kind`` kernel (default: this CPU's)."""
        V, d = I_cols.shape
        kind = kind or _kind() or "vnni"
        if kind == "avx2":
            K2 = -(-d // 2)
            wide = torch.zeros((V, 2 * K2), dtype=torch.int16)
            wide[:, :d] = I_cols
            e = wide.view(torch.int32).view(V // NB, NB, K2).transpose(1, 2).contiguous()
            init = torch.zeros(V, dtype=torch.int32)
            return cls(e=e, init=init, norms=norms.to(torch.int32).contiguous(), d=d, kind=kind)
        K4 = -(-d // 4)
        cols = torch.zeros((V, 4 * K4), dtype=torch.int8)
        cols[:, :d] = I_cols
        e = cols.view(torch.int32).view(V // NB, NB, K4).transpose(1, 2).contiguous()
        init = (-128 * I_cols.to(torch.int32).sum(1)).to(torch.int32).contiguous()
        return cls(e=e, init=init, norms=norms.to(torch.int32).contiguous(), d=d)


def _tokens(I_x: torch.Tensor, K4: int, tile: int, kind: str = "vnni") -> tuple[torch.Tensor, torch.Tensor]:
    """(I_x + 128 as rows ``[G, K4]`` of words, and packed in tiles ``[tiles, K4, tile]``); padding is 128 (I = 0).
    For ``kind="avx2"``: I_x as int16, two a word (``K4`` is then K2), padding 0."""
    G, d = I_x.shape
    tiles = -(-G // tile)
    if kind == "avx2":
        w = torch.zeros((tiles * tile, 2 * K4), dtype=torch.int16)
        w[:G, :d] = I_x
        words16 = w.view(torch.int32)
        return words16[:G], words16.view(tiles, tile, K4).transpose(1, 2).contiguous()
    a = torch.full((tiles * tile, 4 * K4), 128, dtype=torch.uint8)
    a[:G, :d] = (I_x.to(torch.int16) + 128).to(torch.uint8)
    words = a.view(torch.int32)
    return words[:G], words.view(tiles, tile, K4).transpose(1, 2).contiguous()


@dataclasses.dataclass(frozen=True)
class _Tiles:
    """Tokens packed for the key kernel and how a call splits them: their rows (:func:`_tokens`), tiles, the tiles a
    pass over the targets (they stay in cache) and the threads' parts."""

    lib: Any
    rows: torch.Tensor
    tiles: torch.Tensor
    per_pass: int
    parts: int

    @classmethod
    def of(cls, packed: PackedTargets, I_x: torch.Tensor, threads: int) -> _Tiles:
        lib = _lib(packed.kind)
        tile = int(lib.int8_keys_tile())
        rows, tiles = _tokens(I_x, packed.K4, tile, packed.kind)
        per_pass = max(1, _PASS_BYTES // (packed.K4 * tile * 4))
        return cls(lib, rows, tiles, per_pass, max(1, min(threads, tiles.shape[0] // _MIN_TILES_PER_THREAD)))

    def run(self, call: Callable[[int, int, int], None]) -> None:
        """``call(t0, t1, team)`` over every tile, on torch's OpenMP threads or Python threads."""
        run_team(call, self.tiles.shape[0], self.parts, openmp=bool(self.lib.int8_keys_openmp()))


def block_key_maxima(packed: PackedTargets, I_x: torch.Tensor, threads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(each token's largest key in each block, ``[G, blocks]`` int32; the tokens' packed rows for
    :func:`block_keys`)."""
    tl = _Tiles.of(packed, I_x, threads)
    out = torch.empty((tl.tiles.shape[0] * tl.tiles.shape[2], packed.blocks), dtype=torch.int32)

    def run(t0: int, t1: int, team: int) -> None:
        tl.lib.int8_block_maxima(
            tl.tiles.data_ptr(), packed.e.data_ptr(), packed.init.data_ptr(), packed.norms.data_ptr(), packed.K4,
            packed.blocks, t0, t1, tl.per_pass, team, out.data_ptr(),
        )  # fmt: skip

    tl.run(run)
    return out[: I_x.shape[0]], tl.rows


def block_keys(
    packed: PackedTargets, token_rows: torch.Tensor, rows: torch.Tensor, blocks: torch.Tensor
) -> torch.Tensor:
    """``[n, NB]`` int32: the keys of block ``blocks[i]`` for token ``rows[i]`` (``token_rows`` from
    :func:`block_key_maxima`)."""
    n = rows.numel()
    out = torch.empty((n, NB), dtype=torch.int32)
    if n:
        r, b = rows.to(torch.int64).contiguous(), blocks.to(torch.int64).contiguous()
        _lib(packed.kind).int8_block_keys(
            token_rows.contiguous().data_ptr(), packed.e.data_ptr(), packed.init.data_ptr(), packed.norms.data_ptr(),
            r.data_ptr(), b.data_ptr(), packed.K4, n, out.data_ptr(),
        )  # fmt: skip
    return out


class _Bounds(ctypes.Structure):
    """``Bounds`` of ``kernels/int8_bounds.h``."""

    _fields_ = [
        *((name, ctypes.c_void_p) for name in ("Nx", "rx", "rT", "block_r", "size")),
        *((name, ctypes.c_double) for name in ("s", "scale", "gamma")),
        *((name, ctypes.c_int64) for name in ("blocks", "hot", "Vt")),
        *((name, ctypes.c_void_p) for name in ("hot_blocks", "cols", "dlo_c", "dlo_b", "cum")),
    ]


@dataclasses.dataclass(frozen=True)
class BoundTargets:
    """The targets' float64 side of the proposal bounds: r_c per column ``rT`` ``[blocks·NB]`` (0 for padding), its
    maximum per block ``block_r``, the columns per block ``size`` (float64), ``s·(1 − slack)`` and the number of
    real columns ``Vt`` (:class:`~hf_textdp.mechanisms.exponential.ExponentialSampler`)."""

    rT: torch.Tensor
    block_r: torch.Tensor
    size: torch.Tensor
    s: float
    Vt: int


def sampler_bounds(
    packed: PackedTargets,
    bt: BoundTargets,
    I_x: torch.Tensor,
    token: tuple[torch.Tensor, torch.Tensor],
    law: tuple[float, float, int],
    threads: int,
) -> tuple[torch.Tensor, ...]:
    """The sampler's proposal for tokens ``I_x`` ``[G, d]`` with ``token = (N_x int64, r_x float64)`` and
    ``law = (scale, gamma, hot)``: (hot blocks ``[G, hot]``, hot columns ``[G, hot·NB]``, their lower bounds, the
    blocks' lower bounds ``[G, blocks]``, the cumulative weights ``[G, hot·NB + blocks]``), bit for bit those of
    ``ExponentialSampler._bounds_tensors`` (``kernels/int8_bounds.h``; the square roots and exponentials are
    torch's own, taken between the C passes)."""
    tl = _Tiles.of(packed, I_x, threads)
    G = I_x.shape[0]
    scale, gamma, hot = law
    nb = packed.blocks
    kb = torch.empty((tl.tiles.shape[0] * tl.tiles.shape[2], nb), dtype=torch.int32)
    Nx, rx = (t.contiguous() for t in token)
    hot_blocks = torch.empty((G, hot), dtype=torch.int64)
    cols = torch.empty((G, hot * NB), dtype=torch.int64)
    dlo_c = torch.empty((G, hot * NB), dtype=torch.float64)
    dlo_b = torch.empty((G, nb), dtype=torch.float64)
    cum = torch.empty((G, hot * NB + nb), dtype=torch.float64)
    tensors = (Nx, rx, bt.rT, bt.block_r, bt.size, hot_blocks, cols, dlo_c, dlo_b, cum)
    ptr = [t.data_ptr() for t in tensors]
    B = _Bounds(*ptr[:5], bt.s, scale, gamma, nb, hot, bt.Vt, *ptr[5:])

    def run(t0: int, t1: int, team: int) -> None:
        tl.lib.int8_sampler_bounds(
            tl.tiles.data_ptr(), tl.rows.data_ptr(), packed.e.data_ptr(), packed.init.data_ptr(),
            packed.norms.data_ptr(), packed.K4, t0, t1, tl.per_pass, team, G, kb.data_ptr(), ctypes.byref(B),
        )  # fmt: skip

    tl.run(run)
    team = 1  # passes two and three on one thread: a team waits for its second thread on a busy CPU
    cum.sqrt_()  # torch's own roundings of sqrt and exp, as in the tensor form
    tl.lib.int8_sampler_bounds_step(ctypes.byref(B), 2, 0, G, team)
    cum.exp_()
    tl.lib.int8_sampler_bounds_step(ctypes.byref(B), 3, 0, G, team)
    return hot_blocks, cols, dlo_c, dlo_b, cum


def sampler_pick(
    proposal: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    row: torch.Tensor | None,
    u: torch.Tensor,
    size: torch.Tensor,
    Vt: int,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The columns ``[n, T]`` that tries with uniforms ``u`` ``[n, T, 3]`` propose, and their lower bounds, from the
    proposals ``(cols, dlo_c, dlo_b, cum)`` (token i reads row ``row[i]``, or i) with block sizes ``size``: the
    numbers of the tensor form in ``mechanisms/sampler_tries.py`` (``kernels/int8_bounds.h``), or ``None`` where
    no kernel runs or a tensor is not on the CPU."""
    lib = _lib() if native_enabled() else None
    if lib is None or any(t.device.type != "cpu" for t in (*proposal, u)):
        return None
    cols, dlo_c, dlo_b, cum = (t.contiguous() for t in proposal)
    n, T = u.shape[0], u.shape[1]
    uc, sz = u.to(torch.float64).contiguous(), size.to(torch.float64).contiguous()
    r = None if row is None else row.to(torch.int64).contiguous()
    col = torch.empty((n, T), dtype=torch.int64)
    dlo = torch.empty((n, T), dtype=torch.float64)
    ptr = [t.data_ptr() for t in (sz, cols, dlo_c, dlo_b, cum)]
    B = _Bounds(0, 0, 0, 0, ptr[0], 0.0, 0.0, 0.0, dlo_b.shape[1], cols.shape[1] // NB, Vt, 0, *ptr[1:])
    lib.int8_sampler_pick(
        ctypes.byref(B), None if r is None else r.data_ptr(), uc.data_ptr(), n, T, col.data_ptr(), dlo.data_ptr()
    )
    return col, dlo
