"""Triton sources of the kernels that draw from the keyed Philox stream (randomness.md §1).

Imported only by the ``_build`` functions of :mod:`.philox` and :mod:`.noise`, where Triton is there (it is
optional). The kernels share :func:`philox_uniform_pair` as a module global: Triton's interpreter, which
the tests run them under, resolves a kernel's callees among its module's globals, not its closure.
"""

# mypy: disable-error-code="no-untyped-def"
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit  # type: ignore[untyped-decorator]
def philox_uniform_pair(c0, c1, c2, c3, ka, kb):  # pragma: no cover - GPU or interpreter
    """Philox4x32-10 of counter (c0, c1, c2, c3) under key (ka, kb), uint32 tensors (Salmon et al., SC 2011),
    as the block's two uniforms u = (⌊x/2¹²⌋ + ½)·2⁻⁵² of the 64-bit words x = w0:w1 and w2:w3."""
    m0 = tl.full(c0.shape, 0xD2511F53, tl.uint32)
    m1 = tl.full(c0.shape, 0xCD9E8D57, tl.uint32)
    for _ in tl.static_range(10):
        n0 = tl.umulhi(m1, c2) ^ c1 ^ ka
        n2 = tl.umulhi(m0, c0) ^ c3 ^ kb
        c1 = m1 * c2
        c3 = m0 * c0
        c0 = n0
        c2 = n2
        ka = ka + 0x9E3779B9
        kb = kb + 0xBB67AE85
    x01 = (c0.to(tl.uint64) << 32) | c1.to(tl.uint64)
    x23 = (c2.to(tl.uint64) << 32) | c3.to(tl.uint64)
    u0 = ((x01 >> 12).to(tl.float64) + 0.5) * 2.220446049250313e-16  # 2⁻⁵², exact
    u1 = ((x23 >> 12).to(tl.float64) + 0.5) * 2.220446049250313e-16
    return u0, u1


@triton.jit  # type: ignore[untyped-decorator]
def philox_kernel(  # pragma: no cover - GPU or interpreter
    k0_ptr, k1_ptr, pos_ptr, extra_ptr, extra_stride, draw, start, blocks, total, out_ptr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Uniforms 2j, 2j + 1 of blocks start + j of ``draw`` for every token: :func:`.philox.philox_uniforms`."""
    f = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = f < total
    i = f // blocks
    j = f - i * blocks
    ka = tl.load(k0_ptr + i, mask=live, other=0).to(tl.uint32)
    kb = tl.load(k1_ptr + i, mask=live, other=0).to(tl.uint32)
    # scalar arguments may arrive as Python ints (Triton specialises the value 1): arithmetic only
    c0 = (j + start).to(tl.uint32)
    c1 = tl.load(pos_ptr + i, mask=live, other=0).to(tl.uint32)
    c2 = (tl.zeros_like(j) + draw).to(tl.uint32)
    c3 = tl.load(extra_ptr + i * extra_stride, mask=live, other=0).to(tl.uint32)
    u0, u1 = philox_uniform_pair(c0, c1, c2, c3, ka, kb)
    tl.store(out_ptr + 2 * f, u0, mask=live)
    tl.store(out_ptr + 2 * f + 1, u1, mask=live)


@triton.jit  # type: ignore[untyped-decorator]
def shift_kernel(  # pragma: no cover - GPU or interpreter
    x_ptr, k0_ptr, k1_ptr, pos_ptr, r_ptr, out_ptr, d, blocks, draw, BLK: tl.constexpr,
):  # fmt: skip
    """One token per program: fl32(x + r·G/‖G‖), G its Box–Muller normals of ``draw`` (:mod:`.noise`)."""
    i = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, BLK)
    live = j < blocks
    zero = tl.zeros((BLK,), tl.int64)
    ka = (tl.load(k0_ptr + i) + zero).to(tl.uint32)
    kb = (tl.load(k1_ptr + i) + zero).to(tl.uint32)
    c1 = (tl.load(pos_ptr + i) + zero).to(tl.uint32)
    c2 = (zero + draw).to(tl.uint32)
    u0, u1 = philox_uniform_pair(j.to(tl.uint32), c1, c2, zero.to(tl.uint32), ka, kb)
    rho = tl.sqrt(tl.log(u0) * -2.0)
    t = u1 * 6.283185307179586  # fl64(2π), the torch form's constant
    odd = 2 * j + 1 < d
    z0 = tl.where(live, rho * tl.cos(t), 0.0)
    z1 = tl.where(live & odd, rho * tl.sin(t), 0.0)
    norm = tl.sqrt(tl.sum(z0 * z0 + z1 * z1, axis=0))
    s = tl.load(r_ptr + i) / norm
    row = x_ptr + i * d + 2 * j
    x0 = tl.load(row, mask=live, other=0.0).to(tl.float64)
    x1 = tl.load(row + 1, mask=live & odd, other=0.0).to(tl.float64)
    dst = out_ptr + i * d + 2 * j
    tl.store(dst, (x0 + z0 * s).to(tl.float32), mask=live)
    tl.store(dst + 1, (x1 + z1 * s).to(tl.float32), mask=live & odd)


@triton.jit  # type: ignore[untyped-decorator]
def sampler_kernel(  # pragma: no cover - GPU or interpreter
    cum_ptr, cols_ptr, dlo_c_ptr, dlo_b_ptr, size_ptr, e_ptr, x_pos_ptr, tg_ptr, k0_ptr, k1_ptr, pos_ptr,
    par_ptr, out_ptr, tries_ptr, Vt, draw, max_tries,
    W: tl.constexpr, NH: tl.constexpr, NB: tl.constexpr, d: tl.constexpr, BW: tl.constexpr, BD: tl.constexpr,
    BLK: tl.constexpr,
):  # fmt: skip
    """One token per program: the exponential sampler's tries until one is accepted (mechanisms/exponential.py).

    Try t reads blocks 0 and 1 of ``draw`` with extra = t: u₁ picks the bound's entry by the inverse CDF
    over ``cum`` (hot columns, then cold blocks), u₂ the column in a cold block, and log u₃ < −a·gap accepts.
    A token that has not accepted after ``max_tries`` tries writes −1 and its count, for the host to go on.
    """
    g = tl.program_id(0).to(tl.int64)
    rw = tl.arange(0, BW)
    cum = tl.load(cum_ptr + g * W + rw, mask=rw < W, other=float("inf"))
    total = tl.max(tl.where(rw == W - 1, cum, float("-inf")), axis=0)
    rd = tl.arange(0, BD)
    md = rd < d
    x = tl.load(e_ptr + tl.load(x_pos_ptr + g) * d + rd, mask=md, other=0.0).to(tl.float64)
    scale = tl.load(par_ptr)
    gamma = tl.load(par_ptr + 1)
    two = tl.arange(0, 2)
    zero = tl.zeros((2,), tl.int64)
    ka = (tl.load(k0_ptr + g) + zero).to(tl.uint32)
    kb = (tl.load(k1_ptr + g) + zero).to(tl.uint32)
    c1 = (tl.load(pos_ptr + g) + zero).to(tl.uint32)
    c2 = (zero + draw).to(tl.uint32)
    res = tl.full([], -1, tl.int64)
    t = tl.full([], 0, tl.int64)
    while (res < 0) & (t < max_tries):
        w01, w23 = philox_uniform_pair(two.to(tl.uint32), c1, c2, (zero + t).to(tl.uint32), ka, kb)
        u1 = tl.sum(tl.where(two == 0, w01, 0.0), axis=0)  # uniform 0: block 0, words 0–1
        u2 = tl.sum(tl.where(two == 0, w23, 0.0), axis=0)  # uniform 1: block 0, words 2–3
        u3 = tl.sum(tl.where(two == 1, w01, 0.0), axis=0)  # uniform 2: block 1, words 0–1
        target = u1 * total
        k = tl.minimum(tl.sum((cum <= target).to(tl.int64), axis=0), W - 1)  # searchsorted(right=True)
        hot = k < NH
        kh = tl.minimum(k, NH - 1)
        b = tl.maximum(k - NH, 0)
        size = tl.load(size_ptr + b)
        within = tl.minimum((u2 * size).to(tl.int64), BLK - 1)
        col = tl.where(hot, tl.load(cols_ptr + g * NH + kh), b * BLK + within)
        col = tl.minimum(col, Vt - 1)
        dlo = tl.where(hot, tl.load(dlo_c_ptr + g * NH + kh), tl.load(dlo_b_ptr + g * NB + b))
        e = tl.load(e_ptr + tl.load(tg_ptr + col) * d + rd, mask=md, other=0.0).to(tl.float64)
        dist = tl.sqrt(tl.sum((x - e) * (x - e), axis=0))
        gap = tl.maximum(tl.minimum(dist, gamma) - dlo, 0.0)
        ok = tl.log(u3) < -scale * gap
        res = tl.where(ok, col, res)
        t += 1
    tl.store(out_ptr + g, res)
    tl.store(tries_ptr + g, t)
