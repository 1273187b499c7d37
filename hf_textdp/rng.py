"""Keyed, counter-based randomness: one Philox4x32-10 stream per row (docs/mechanisms/randomness.md).

Every random number the package draws is a pure function of a 64-bit key and a 128-bit counter:

* **key** — ``derive_row_seed(seed, row_id, split, stream)`` (SHA-256 of the secret seed, the row id,
  the split name and the noise stream), split into its low and high 32-bit words; without a seed,
  fresh OS entropy per row;
* **counter** — ``(j, position, draw, extra)``: block ``j`` of draw kind ``draw`` (:class:`Draw`) of
  the token at ``position`` among its row's privatized tokens, ``extra`` numbering the tries of a
  rejection sampler (0 otherwise).

Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011)
is evaluated here with int64 tensor operations whose results are exact integers, so the same key and
counter give the same 128 bits on every device, for every batch layout and engine. A block gives two
float64 uniforms on the open interval (0, 1), ``u = (⌊x / 2¹²⌋ + ½)·2⁻⁵²`` from 64 bits x; normals
(Box–Muller), exponentials (−log u), Laplace and Gamma draws are exact transforms of them.

The seed is a secret key: whoever knows it can recompute every draw.
"""

from __future__ import annotations

import enum
import hashlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .cpu.noise import native_normals, native_uniforms
from .errors import InvalidParameterError, ParameterTypeError
from .gpu.philox import philox_uniforms
from .utils.threads import torch_threads


__all__ = [
    "STREAM_VERSION",
    "WEAK_SEED_BOUND",
    "Draw",
    "Streams",
    "derive_row_seed",
    "derive_row_seeds",
    "fresh_seed",
    "philox4x32",
    "streams_for_rows",
    "as_streams",
    "validate_seed",
    "validate_secret_seed",
    "validate_split",
    "validate_stream",
]

#: the layout of counters and the samplers that read them; bumped (and named in CHANGELOG.md) whenever a
#: change alters seeded outputs
STREAM_VERSION = 2

_KEY_PREFIX = b"hf_textdp/rng/v1\x00"  # unchanged from v1: derive_row_seed's known answers stay
_U64 = 2**64
#: seeds below this are refused as noise keys unless ``allow_weak_seed=True``: 2**32 keys are searched in hours
WEAK_SEED_BOUND = 2**32
_I63 = 2**63
_MASK = 0xFFFFFFFF
_M0, _M1 = 0xD2511F53, 0xCD9E8D57  # Philox round multipliers
_W0, _W1 = 0x9E3779B9, 0xBB67AE85  # Weyl key increments
_ROUNDS = 10
_TWO_PI = 2.0 * math.pi
#: blocks generated per tensor operation: temporaries of 256 KB stay in cache (2–4× faster than 2 MB here)
_CHUNK = 1 << 15


class Draw(enum.IntEnum):
    """What a draw is for: word 2 of the counter, so that no two uses of a row's key share a block."""

    NOISE = 1  # an additive mechanism's per-coordinate noise (normals, Laplace, truncated Laplace)
    RADIUS = 2  # the Gamma radius of madlib, privemb and mahalanobis (Marsaglia–Tsang tries)
    TOP2 = 3  # top2's choice between the two nearest candidates
    RANK = 4  # rank's truncated geometric draw
    SAMPLER = 5  # a selection mechanism's tries (proposal and acceptance)
    COIN = 6  # santext_plus's protected/unprotected coin


# --------------------------------------------------------------------------- validation
def validate_seed(seed: Any, name: str = "seed") -> int | None:
    """Check that ``seed`` is ``None`` or an int in [0, 2**64); return it."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ParameterTypeError(f"{name} must be an int in [0, 2**64) or None, got {type(seed).__name__}.")
    if not 0 <= seed < _U64:
        raise InvalidParameterError(f"{name} must be an int in [0, 2**64), got a value out of range.")
    return int(seed)


def validate_secret_seed(seed: Any, *, allow_weak_seed: bool = False) -> int | None:
    """Check ``seed`` as a secret noise key: :func:`validate_seed`, and refuse one below 2**32 unless allowed.

    A small seed can be searched: whoever holds the output tries every seed until the noise it gives
    matches. Public benchmark data may use one (``allow_weak_seed=True``); private data may not.
    """
    if not isinstance(allow_weak_seed, bool):
        raise ParameterTypeError(f"allow_weak_seed must be a bool, got {type(allow_weak_seed).__name__}.")
    value = validate_seed(seed)
    if value is not None and value < WEAK_SEED_BOUND and not allow_weak_seed:
        # the seed's value is never printed: it is a secret key
        raise InvalidParameterError(
            "seed is below 2**32 and can be searched; use >= 64 random bits (secrets.randbits(64), or "
            '`python -c "import secrets; print(secrets.randbits(64))" > my.seed` with --seed-file), or pass '
            "allow_weak_seed=True (CLI --allow-weak-seed) for public benchmark data only."
        )
    return value


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


# --------------------------------------------------------------------------- keys
def derive_row_seed(seed: int, row_id: int, split: str = "", stream: int = 0) -> int:
    """The 63-bit Philox key of one row (docs/mechanisms/randomness.md, "Key").

    Args:
        seed (`int`): the secret seed, 0 <= seed < 2**64.
        row_id (`int`): the row's index in its split, or its ``id_column`` value, 0 <= row_id < 2**63.
        split (`str`, defaults to `""`): the split name, so two splits never share noise.
        stream (`int`, defaults to `0`): 0 for one-time privatization, epoch + 1 for collators.

    Example:

    >>> derive_row_seed(42, 17, "train", 0)
    3880023052778407084
    """
    return derive_row_seeds(seed, [row_id], split, stream)[0]


def derive_row_seeds(seed: int, row_ids: Sequence[int], split: str = "", stream: int = 0) -> list[int]:
    """:func:`derive_row_seed` of each of ``row_ids`` (the arguments checked and the hash's prefix built once).

    Example:

    >>> derive_row_seeds(42, [17, 18], "train") == [derive_row_seed(42, 17, "train"), derive_row_seed(42, 18, "train")]
    True
    """
    validate_seed(seed)
    validate_stream(stream)
    validate_split(split)
    split_utf8 = split.encode("utf-8")
    prefix = hashlib.sha256(
        _KEY_PREFIX
        + seed.to_bytes(8, "little")
        + stream.to_bytes(8, "little")
        + len(split_utf8).to_bytes(4, "little")
        + split_utf8
    )
    keys = []
    for row_id in row_ids:
        if isinstance(row_id, bool) or not isinstance(row_id, int) or not 0 <= row_id < _I63:
            raise InvalidParameterError(f"row_id must be an int in [0, 2**63), got {row_id!r}.")
        h = prefix.copy()
        h.update(row_id.to_bytes(8, "little"))
        keys.append(int.from_bytes(h.digest()[:8], "little") & (_I63 - 1))
    return keys


def fresh_seed() -> int:
    """63 bits of OS entropy (a row's key when no seed is given)."""
    return int.from_bytes(os.urandom(8), "little") & (_I63 - 1)


# --------------------------------------------------------------------------- Philox4x32-10
def philox4x32(
    c0: torch.Tensor, c1: torch.Tensor, c2: torch.Tensor, c3: torch.Tensor, k0: torch.Tensor, k1: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Philox4x32-10 on int64 tensors holding 32-bit words (broadcast together); returns the 4 output words.

    Each round multiplies two words by 32-bit constants: the product (< 2⁶⁴) wraps in int64, and its
    high and low 32-bit halves are recovered exactly by a shift and a mask, so the result is the
    same integer on every device. Random123's known answers are in the tests.

    Example:

    >>> z = torch.zeros(1, dtype=torch.int64)
    >>> [f"{int(w):08x}" for w in philox4x32(z, z, z, z, z, z)]
    ['6627e8d5', 'e169c58d', 'bc57ac4c', '9b00dbd8']
    """
    k0 = k0.to(torch.int64)
    k1 = k1.to(torch.int64)
    c0, c1, c2, c3, _, _ = torch.broadcast_tensors(c0, c1, c2, c3, k0, k1)  # type: ignore[no-untyped-call]
    for r in range(_ROUNDS):
        if r:
            k0 = (k0 + _W0) & _MASK
            k1 = (k1 + _W1) & _MASK
        p0 = c0 * _M0
        p1 = c2 * _M1
        n0 = (p1 >> 32).bitwise_and_(_MASK).bitwise_xor_(c1).bitwise_xor_(k0)
        n2 = (p0 >> 32).bitwise_and_(_MASK).bitwise_xor_(c3).bitwise_xor_(k1)
        c0, c1, c2, c3 = n0, p1.bitwise_and_(_MASK), n2, p0.bitwise_and_(_MASK)
    return c0, c1, c2, c3


def _uniform52(hi: torch.Tensor, lo: torch.Tensor) -> torch.Tensor:
    """float64 on (0, 1) from 64 bits hi:lo: ``(⌊x/2¹²⌋ + ½)·2⁻⁵²`` (every value exact, the largest 1 − 2⁻⁵³)."""
    top = (hi << 20).bitwise_or_(lo >> 12)  # the top 52 bits of hi:lo, < 2⁵² (exact in float64)
    return top.to(torch.float64).add_(0.5).mul_(2.0**-52)


# --------------------------------------------------------------------------- streams
@dataclass(frozen=True)
class Streams:
    """The keyed streams of ``N`` tokens: token i has key ``(k0[i], k1[i])`` and ``position[i]`` in its row.

    All draws are ``[N, n]`` tensors on ``device``; draw ``j`` of kind ``draw`` for token ``i`` depends on
    its key, its position, ``draw``, ``j`` and ``extra`` only, never on the other tokens of the batch.

    Example:

    >>> s = streams_for_rows([derive_row_seed(2**40 + 1, 0)], [3])
    >>> s.uniforms(Draw.NOISE, 2).shape
    torch.Size([3, 2])
    """

    k0: torch.Tensor  # [N] int64, low 32 bits of the row key
    k1: torch.Tensor  # [N] int64, high bits of the row key
    position: torch.Tensor  # [N] int64, the token's index among its row's privatized tokens

    def __len__(self) -> int:
        return int(self.position.shape[0])

    @property
    def device(self) -> torch.device:
        return self.position.device

    def select(self, index: torch.Tensor) -> Streams:
        """The streams of a subset of the tokens (``index``: positions into this batch or a bool mask)."""
        index = index.to(self.position.device)
        return Streams(self.k0[index], self.k1[index], self.position[index])

    def slice(self, start: int, stop: int) -> Streams:
        """The streams of tokens ``start … stop − 1`` of this batch (views, no copy)."""
        return Streams(self.k0[start:stop], self.k1[start:stop], self.position[start:stop])

    def to(self, device: torch.device | str) -> Streams:
        return Streams(self.k0.to(device), self.k1.to(device), self.position.to(device))

    def words(
        self, draw: int, blocks: int, extra: int | torch.Tensor = 0, start: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The 4 words ``[N, blocks]`` of blocks ``start … start + blocks − 1`` of ``draw`` for every token."""
        N = len(self)
        dev = self.device
        j = torch.arange(start, start + blocks, dtype=torch.int64, device=dev)[None, :]
        pos = self.position[:, None]
        c2 = torch.full((1, 1), int(draw), dtype=torch.int64, device=dev)
        c3 = (
            extra[:, None].to(dev, torch.int64)
            if isinstance(extra, torch.Tensor)
            else torch.full((1, 1), int(extra), dtype=torch.int64, device=dev)
        )
        k0, k1 = self.k0[:, None], self.k1[:, None]
        if N * blocks <= _CHUNK or N == 0:
            return philox4x32(j.expand(N, blocks), pos.expand(N, blocks), c2, c3, k0, k1)
        rows = max(1, _CHUNK // max(blocks, 1))
        parts = [
            philox4x32(
                j.expand(min(rows, N - s), blocks),
                pos[s : s + rows].expand(-1, blocks),
                c2,
                c3[s : s + rows] if c3.shape[0] > 1 else c3,
                k0[s : s + rows],
                k1[s : s + rows],
            )
            for s in range(0, N, rows)
        ]
        return tuple(torch.cat([p[i] for p in parts], 0) for i in range(4))  # type: ignore[return-value]

    def uniforms(self, draw: int, n: int, extra: int | torch.Tensor = 0, start: int = 0) -> torch.Tensor:
        """``[N, n]`` float64 uniforms on (0, 1): uniform 2j from words (0, 1) of block j, 2j + 1 from (2, 3).

        ``start`` skips the first ``start`` blocks (uniforms 2·start … 2·start + n − 1 of the draw). On the
        CPU the compiled kernel (``kernels/philox.c``) computes them, on a GPU its Triton twin
        (:mod:`hf_textdp.gpu.philox`), else the int64 tensor form of :func:`philox4x32`: the same bits
        every way.
        """
        blocks = (n + 1) // 2
        u = native_uniforms(self.k0, self.k1, self.position, draw, blocks, extra, start)
        if u is None:
            u = philox_uniforms(self.k0, self.k1, self.position, extra, draw, start, blocks)
        if u is None:
            w0, w1, w2, w3 = self.words(draw, blocks, extra, start)
            u = torch.stack([_uniform52(w0, w1), _uniform52(w2, w3)], dim=2).reshape(len(self), 2 * blocks)
        return u[:, :n] if 2 * blocks != n else u

    def normals(self, draw: int, n: int, extra: int | torch.Tensor = 0) -> torch.Tensor:
        """``[N, n]`` float64 standard normals by Box–Muller on uniform pairs (2j, 2j + 1), i.e. block j.

        z₂ⱼ = r·cos 2πu₂ⱼ₊₁ and z₂ⱼ₊₁ = r·sin 2πu₂ⱼ₊₁ with r = √(−2 ln u₂ⱼ). On the CPU one compiled kernel
        draws them (``kernels/philox.c``: its own logarithm, cosine and sine, within an ulp or so of torch's).
        """
        blocks = (n + 1) // 2
        if (z := native_normals(self.k0, self.k1, self.position, draw, blocks, extra)) is not None:  # CPU only
            return z[:, :n] if 2 * blocks != n else z
        u = self.uniforms(draw, 2 * blocks, extra).view(len(self), blocks, 2)
        r = u[:, :, 0].log().mul_(-2.0).sqrt_()
        t = u[:, :, 1].mul(_TWO_PI)
        z = torch.empty((len(self), blocks, 2), dtype=torch.float64, device=self.device)
        torch.mul(r, t.cos(), out=z[:, :, 0])
        torch.mul(r, t.sin_(), out=z[:, :, 1])
        z2 = z.view(len(self), 2 * blocks)
        return z2[:, :n] if 2 * blocks != n else z2

    def exponentials(self, draw: int, n: int, extra: int | torch.Tensor = 0) -> torch.Tensor:
        """``[N, n]`` float64 unit exponentials, −log u."""
        return self.uniforms(draw, n, extra).log_().neg_()

    def gamma(self, draw: int, shape: float) -> torch.Tensor:
        """``[N]`` float64 Gamma(shape, 1) draws (shape ≥ 1) by Marsaglia and Tsang's exact rejection method.

        Try t uses block t of ``draw``: its first uniform gives a normal x = Φ⁻¹(u₁), its second the
        acceptance test ``log u₂ < x²/2 + a − a·v + a·log v`` with a = shape − ⅓, v = (1 + x/√(9a))³
        (Marsaglia & Tsang 2000, ACM TOMS 26(3)). Tries are drawn 4 at a time until every token has
        accepted one, so the value is the first accepted try's whatever the batch.
        """
        if shape < 1.0:
            raise InvalidParameterError(f"gamma shape must be >= 1, got {shape!r}.")
        a = shape - 1.0 / 3.0
        # one intra-op thread: these passes over [N, 4] are elementwise (the same values on any thread count), and on
        # CPU cores shared with other processes each multi-threaded pass can wait a scheduler slice for its second
        # thread (12,500 tokens: 3.2 ms on one thread, 300 ms on two under load); the uniforms' kernel also runs alone
        with torch_threads(1 if self.device.type == "cpu" else None):
            return self._gamma(draw, a)

    def _gamma(self, draw: int, a: float) -> torch.Tensor:
        """:meth:`gamma`'s tries, with a = shape − ⅓."""
        c = 1.0 / math.sqrt(9.0 * a)
        N = len(self)
        out = torch.empty(N, dtype=torch.float64, device=self.device)
        todo = torch.arange(N, device=self.device)
        start = 0
        while todo.numel():
            sub = self if todo.numel() == N and start == 0 else self.select(todo)
            u = sub.uniforms(draw, 8, start=start)
            x = torch.special.ndtri(u[:, 0::2])
            lu = u[:, 1::2].log()
            v = (1.0 + c * x) ** 3
            ok = (v > 0) & (lu < 0.5 * x * x + a - a * v + a * torch.log(v.clamp(min=1e-300)))
            done = ok.any(1)
            first = ok.to(torch.int8).argmax(1)
            value = a * v.gather(1, first[:, None])[:, 0]
            if sub is self:  # every token at once: one host synchronisation when (nearly always) all accepted
                out.copy_(value)
                if bool(done.all()):
                    return out
            else:
                rows = torch.nonzero(done, as_tuple=True)[0]
                out[todo[rows]] = value[rows]
            todo = todo[~done]
            start += 4
        return out


def streams_for_rows(
    keys: Sequence[int] | torch.Tensor, sizes: Sequence[int], device: torch.device | str = "cpu"
) -> Streams:
    """The streams of consecutive rows: row r has key ``keys[r]`` and ``sizes[r]`` tokens at positions 0…n−1."""
    k = torch.as_tensor(list(keys) if not isinstance(keys, torch.Tensor) else keys, dtype=torch.int64)
    n = torch.as_tensor(list(sizes), dtype=torch.int64)
    if k.shape != n.shape:
        raise InvalidParameterError(f"keys and sizes must have equal lengths, got {k.numel()} and {n.numel()}.")
    total = int(n.sum()) if n.numel() else 0
    key = torch.repeat_interleave(k, n) if total else torch.empty(0, dtype=torch.int64)
    starts = torch.cumsum(n, 0) - n
    position = torch.arange(total, dtype=torch.int64) - torch.repeat_interleave(starts, n)
    return Streams((key & _MASK).to(device), (key >> 32).to(device), position.to(device))


def as_streams(source: Streams | torch.Generator | int, n: int, device: torch.device | str = "cpu") -> Streams:
    """Streams for ``n`` tokens of one row: ``source`` as is, a key (int), or a key drawn from a torch generator.

    The generator form serves direct calls of a mechanism's math (tests, audits); the pipeline always
    passes the rows' own :class:`Streams`.
    """
    if isinstance(source, Streams):
        if len(source) != n:
            raise InvalidParameterError(f"streams hold {len(source)} tokens but {n} vectors were given.")
        return source.to(device)
    if isinstance(source, torch.Generator):
        key = int(torch.randint(0, _I63 - 1, (1,), generator=source, device=source.device).item())
    elif isinstance(source, int) and not isinstance(source, bool) and 0 <= source < _I63:
        key = source
    else:
        raise ParameterTypeError(
            f"expected Streams, a torch.Generator or an int key in [0, 2**63), got {type(source).__name__}."
        )
    return streams_for_rows([key], [n], device)
