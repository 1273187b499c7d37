"""Compiled (numba) kernels: torch's MT19937 stream and the fused Gumbel filter (spec §1.6, §6.4).

Imported only through :func:`hf_textdp.mt19937.kernels`, which returns None when numba is missing.
Every function here is also plain Python (run it with ``NUMBA_DISABLE_JIT=1`` to debug).

* :func:`fill_uniform` — the float64 draws of ``Tensor.uniform_(0, 1)`` on a CPU generator, from the
  MT19937 words: ``((a·2³² + b) mod 2⁵³)·2⁻⁵³`` for consecutive tempered outputs a, b.
* :func:`scan_chunk` — one chunk of :func:`hf_textdp.mechanisms.gumbel_filter.gumbel_max_rows`: for
  each token, draws its ``c`` uniforms (the reference's ``rand(B, c)`` of its row, in order) and keeps
  the columns whose interval for the reference's score s can still reach the largest lower bound T.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


_U32 = np.uint32
_UPPER = np.uint32(0x80000000)
_LOWER = np.uint32(0x7FFFFFFF)
_MATRIX_A = np.uint32(0x9908B0DF)
_TWO53 = 1.0 / 9007199254740992.0
_B = 16  # columns per block of the threshold pass


@njit(cache=True, nogil=True, boundscheck=False)
def _next_block(mt: np.ndarray, raw: np.ndarray) -> None:  # pragma: no cover - compiled
    """MT19937's twist of the 624 words (in place), then their tempered outputs into ``raw``."""
    n, m = 624, 397
    one = _U32(1)
    for i in range(n - m):
        y = (mt[i] & _UPPER) | (mt[i + 1] & _LOWER)
        mt[i] = mt[i + m] ^ (y >> one) ^ (_MATRIX_A * (y & one))
    for i in range(n - m, n - 1):
        y = (mt[i] & _UPPER) | (mt[i + 1] & _LOWER)
        mt[i] = mt[i + m - n] ^ (y >> one) ^ (_MATRIX_A * (y & one))
    y = (mt[n - 1] & _UPPER) | (mt[0] & _LOWER)
    mt[n - 1] = mt[m - 1] ^ (y >> one) ^ (_MATRIX_A * (y & one))
    _temper(mt, raw)


@njit(cache=True, nogil=True, boundscheck=False)
def _temper(mt: np.ndarray, raw: np.ndarray) -> None:  # pragma: no cover - compiled
    for i in range(624):
        y = mt[i]
        y ^= y >> _U32(11)
        y ^= (y << _U32(7)) & _U32(0x9D2C5680)
        y ^= (y << _U32(15)) & _U32(0xEFC60000)
        y ^= y >> _U32(18)
        raw[i] = y


@njit(cache=True, nogil=True, boundscheck=False)
def temper_rows(mt: np.ndarray, raw: np.ndarray) -> None:  # pragma: no cover - compiled
    """``raw[r]`` = the tempered outputs of ``mt[r]``'s current block, for every row r."""
    for r in range(mt.shape[0]):
        _temper(mt[r], raw[r])


@njit(cache=True, nogil=True, boundscheck=False)
def fill_uniform(mt: np.ndarray, pos: np.ndarray, raw: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover
    """``out[:] = uniform_(0, 1)`` float64 draws; advances (``mt``, ``pos`` = (left, next), ``raw``).

    torch's engine returns word ``next`` and decrements ``left``, twisting when it reaches 0, so the
    words ``next … next + left − 2`` of the current block are still unread.
    """
    n = out.shape[0]
    p = pos[1]
    end = p + pos[0] - 1
    k = 0
    mask = np.int64(0x1FFFFF)
    while k < n:
        if end - p >= 2:
            m = min((end - p) // 2, n - k)
            if p % 2 == 0:  # the usual case (uniform_ consumes words in pairs): both words in one load
                pairs = raw[p : p + 2 * m].view(np.uint64)  # little-endian: a is the low half
                for j in range(m):
                    v = pairs[j]
                    hi = np.int64(v & np.uint64(0x1FFFFF))
                    out[k + j] = np.float64((hi << np.int64(32)) | np.int64(v >> np.uint64(32))) * _TWO53
            else:
                for j in range(m):
                    hi = np.int64(raw[p + 2 * j]) & mask
                    out[k + j] = np.float64((hi << np.int64(32)) | np.int64(raw[p + 2 * j + 1])) * _TWO53
            k += m
            p += 2 * m
        else:  # the pair straddles a twist
            if end - p == 1:
                a = raw[p]
                _next_block(mt, raw)
                b = raw[0]
                p = 1
            else:
                _next_block(mt, raw)
                a = raw[0]
                b = raw[1]
                p = 2
            end = 624
            hi = np.int64(a) & mask
            out[k] = np.float64((hi << np.int64(32)) | np.int64(b)) * _TWO53
            k += 1
    pos[0] = end - p + 1
    pos[1] = p


@njit(cache=True, nogil=True, boundscheck=False)
def _upper(p: float, ell: float, c_lo: float, prm: np.ndarray) -> float:  # pragma: no cover - compiled
    """hi ≥ s (``gumbel_filter._Bounds.upper``); prm = (s_lo, s_hi, g_lo, g_hi, κ, 2K)."""
    q = abs(p) * prm[5] + 2.0 * p
    d = math.sqrt(max(c_lo - q, 0.0)) * prm[0]
    d = min(d, prm[2])
    return float(-d - ell + prm[4])


@njit(cache=True, nogil=True, boundscheck=False)
def _lower(p: float, ell: float, c_hi: float, prm: np.ndarray) -> float:  # pragma: no cover - compiled
    """lo ≤ s (``gumbel_filter._Bounds.lower``)."""
    q = abs(p) * -prm[5] + 2.0 * p
    d = math.sqrt(max(c_hi - q, 0.0)) * prm[1]
    d = min(d, prm[3])
    return float(-d - ell - prm[4])


@njit(cache=True, nogil=True, boundscheck=False)
def _key(bits: np.uint16) -> np.int32:  # pragma: no cover - compiled
    """An int32 that orders bf16 values like their floats (sign-magnitude to two's complement)."""
    x = np.int32(np.int16(bits))
    return x ^ ((x >> np.int32(15)) & np.int32(0x7FFF))


@njit(cache=True, nogil=True, boundscheck=False)
def _ell(u: float) -> float:  # pragma: no cover - compiled
    """log(−log u): s = a − ℓ adds a standard Gumbel; u = 0 gives +inf (never chosen)."""
    if u <= 0.0:
        return math.inf
    return math.log(-math.log(u))


@njit(cache=True, nogil=True, boundscheck=False)
def _u_threshold(a_hi: float, t: float, kappa: float) -> float:  # pragma: no cover - compiled
    """A u below which ℓ(u) > a_hi + κ − t, so hi < t for every column of the chunk (0: none).

    ℓ is decreasing, and ℓ(u) ≤ X ⇔ u ≥ exp(−e^X); X is raised and the result lowered by relative
    10⁻⁹, far above the rounding of exp, so a column that could reach t is never below it.
    """
    x = a_hi + kappa - t
    if not x < 600.0:  # also NaN-safe: keep everything
        return 0.0
    if x < -700.0:  # no column can reach t
        return 2.0
    x = x + 1e-9 * (1.0 + abs(x))
    return math.exp(-math.exp(x)) * (1.0 - 1e-9)


@njit(cache=True, nogil=True, boundscheck=False)
def scan_chunk(
    mt: np.ndarray,
    pos: np.ndarray,
    raw: np.ndarray,
    tok_row: np.ndarray,
    p16: np.ndarray,
    c_lo: np.ndarray,
    c_hi: np.ndarray,
    t_best: np.ndarray,
    prm: np.ndarray,
    c0: int,
    out_t: np.ndarray,
    out_c: np.ndarray,
    out_h: np.ndarray,
    out_e: np.ndarray,
    count: int,
    tok_from: int,
) -> tuple[int, int]:  # pragma: no cover - compiled
    """One chunk for tokens ``tok_from …``: draw each token's uniforms, keep the columns with hi ≥ T.

    ``p16`` [≥ N, c] holds the bf16 filter scores' bits. Each token's draws come from its row's state
    (``tok_row``), in token order, so each row's stream is the reference's ``rand(B_r, c)``. T
    (``t_best``) starts from the lower bounds of the chunk's best-scoring and largest-u columns, then
    only columns with u ≥ u_t (see :func:`_u_threshold`) get intervals; a kept column appends
    (token, c0 + column, hi, ℓ) at ``count``. Returns (count, next token): the next token is N when the
    chunk is done, earlier when fewer than c free slots are left (grow the buffers, call again).
    """
    n_tok = tok_row.shape[0]
    c = p16.shape[1]
    cap = out_t.shape[0]
    u = np.empty(c, dtype=np.float64)
    ub = u.view(np.int64)  # u ≥ 0: its bits order like its values
    w = np.empty(c, dtype=np.uint32)
    pf = w.view(np.float32)
    tu = np.empty(1, dtype=np.float64)
    tb = tu.view(np.int64)
    w1 = np.empty(1, dtype=np.uint32)
    f1 = w1.view(np.float32)
    kappa = prm[4]
    low = np.int32(-(2**31))
    nb = c // _B
    for b in range(tok_from, n_tok):
        if count + c > cap:
            return count, b
        r = tok_row[b]
        fill_uniform(mt[r], pos[r], raw[r], u)
        row = p16[b]
        kmax = low
        for j in range(c):  # vectorised: the best bf16 score (by an order key) and the fp32 values
            kmax = max(kmax, _key(row[j]))
            w[j] = _U32(row[j]) << _U32(16)  # bf16 → fp32, exact
        k2 = low
        n_top = 0
        for j in range(c):  # the second-best score and the number of columns at the best
            key = _key(row[j])
            k2 = max(k2, key if key != kmax else low)
            n_top += key == kmax
        if n_top > 1:
            k2 = kmax
        jp = 0
        while _key(row[jp]) != kmax:
            jp += 1
        # the best-scoring column (usually the input itself) is looked at alone: the others score at
        # most the second best, which sets the u threshold below which a column cannot reach T
        t = t_best[b]
        lo_b = c_lo[b]
        hi_b = c_hi[b]
        ell_p = _ell(u[jp])
        t = max(t, _lower(np.float64(pf[jp]), ell_p, hi_b, prm))
        if k2 > low:
            w1[0] = _U32(np.uint16(k2 ^ ((k2 >> np.int32(15)) & np.int32(0x7FFF)))) << _U32(16)
            a_hi = _upper(np.float64(f1[0]), 0.0, lo_b, prm) - kappa
        else:
            a_hi = -math.inf
        tu[0] = _u_threshold(a_hi, t, kappa)
        for k in range(nb + 1):  # blocks of _B columns: one vectorised maximum decides whether to look in
            j0 = k * _B
            j1 = min(j0 + _B, c)
            if k < nb:
                bmax = ub[j0]
                for j in range(1, _B):
                    bmax = max(bmax, ub[j0 + j])
                if bmax < tb[0]:
                    continue
            for j in range(j0, j1):
                if ub[j] < tb[0] or j == jp:
                    continue
                ell = _ell(u[j])
                pj = np.float64(pf[j])
                hi = _upper(pj, ell, lo_b, prm)
                if hi < t:
                    continue
                lo = _lower(pj, ell, hi_b, prm)
                if lo > t:
                    t = lo
                    tu[0] = _u_threshold(a_hi, t, kappa)
                out_t[count] = b
                out_c[count] = c0 + j
                out_h[count] = hi
                out_e[count] = ell
                count += 1
        hi = _upper(np.float64(pf[jp]), ell_p, lo_b, prm)
        if hi >= t:
            out_t[count] = b
            out_c[count] = c0 + jp
            out_h[count] = hi
            out_e[count] = ell_p
            count += 1
        t_best[b] = t
    return count, n_tok
