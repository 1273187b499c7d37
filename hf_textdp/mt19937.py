"""torch's CPU random stream, reproduced bit for bit outside torch (for fused samplers; spec §1.6).

A CPU ``torch.Generator`` is a 32-bit Mersenne Twister (MT19937, Matsumoto & Nishimura 1998) and
``Tensor.uniform_(0, 1)`` in float64 makes each draw from two consecutive outputs a, b as
``((a·2³² + b) mod 2⁵³) · 2⁻⁵³`` (ATen ``uniform_real_distribution<double>`` over ``random64()``).
:class:`TorchMT` reads a generator's state (``get_state()``: ``left``, ``next`` and the 624 state words
of ATen's ``CPUGeneratorImplState``), draws the same numbers in compiled code, and writes the advanced
state back with ``set_state``. The generator passed in remains the only source of randomness: the
numbers are its own, in its own order, and it ends in the state ``uniform_`` would have left.

This depends on torch's internal layout and algorithm, so :func:`mirror_available` checks it once per
process against ``uniform_`` itself (several seeds, offsets and lengths, state included); where the
check fails, or numba is not installed, callers keep using torch.
"""

from __future__ import annotations

import functools
import logging
import struct
from typing import Any

import numpy as np
import torch


__all__ = ["TorchMT", "mirror_available", "kernels"]

logger = logging.getLogger(__name__)

N_STATE = 624
_STATE_BYTES = 5056  # sizeof(CPUGeneratorImplState) on the platforms torch ships for
_OFF_LEFT, _OFF_NEXT, _OFF_WORDS = 8, 16, 24


@functools.cache
def kernels() -> Any:
    """The compiled kernels module (:mod:`hf_textdp._kernels`), or None without numba."""
    try:
        from . import _kernels
    except Exception:  # no numba (or a broken one): torch's own path is used
        return None
    return _kernels


class TorchMT:
    """The MT19937 states of several CPU generators, as arrays the compiled kernels advance.

    ``mt[r]`` holds row r's 624 words, ``pos[r] = (left, next)`` torch's counters and ``raw[r]`` the
    tempered outputs of the current block (valid from ``next`` on).
    """

    def __init__(self, generators: list[torch.Generator]) -> None:
        n = len(generators)
        self.mt = np.empty((n, N_STATE), dtype=np.uint32)
        self.pos = np.empty((n, 2), dtype=np.int64)
        self.raw = np.empty((n, N_STATE), dtype=np.uint32)
        self._templates: list[bytes] = []
        for r, g in enumerate(generators):
            blob = g.get_state().numpy().tobytes()
            self._templates.append(blob)
            left, nxt = _unpack(blob)
            self.mt[r] = np.frombuffer(blob, dtype="<u8", count=N_STATE, offset=_OFF_WORDS)
            self.pos[r] = (left, nxt)
        k = kernels()
        if n and k is not None:
            k.temper_rows(self.mt, self.raw)

    def snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        """A copy of the words and counters (the state before some draws), for :meth:`state_tensor`."""
        return self.mt.copy(), self.pos.copy()

    def state_tensor(self, r: int, snap: tuple[np.ndarray, np.ndarray] | None = None) -> torch.Tensor:
        """Row r's state (now, or in ``snap``) as a ``get_state()`` tensor for ``Generator.set_state``."""
        mt, pos = snap if snap is not None else (self.mt, self.pos)
        buf = bytearray(self._templates[r])
        struct.pack_into("<i", buf, _OFF_LEFT, int(pos[r, 0]))
        struct.pack_into("<Q", buf, _OFF_NEXT, int(pos[r, 1]))
        buf[_OFF_WORDS : _OFF_WORDS + 8 * N_STATE] = mt[r].astype("<u8").tobytes()
        return torch.frombuffer(buf, dtype=torch.uint8).clone()

    def store(self, generators: list[torch.Generator]) -> None:
        """Write the advanced states back into the generators."""
        for r, g in enumerate(generators):
            g.set_state(self.state_tensor(r))


def _unpack(blob: bytes) -> tuple[int, int]:
    (left,) = struct.unpack_from("<i", blob, _OFF_LEFT)
    (nxt,) = struct.unpack_from("<Q", blob, _OFF_NEXT)
    return int(left), int(nxt)


@functools.cache
def mirror_available() -> bool:
    """Whether the compiled kernels reproduce ``uniform_`` here: numbers and end state, checked once.

    Also compiles (or loads from numba's cache) the filter's kernel; any failure of numba here (no
    writable cache, an unsupported CPU) means False: the callers then use torch ops, with the same
    numbers.
    """
    k = kernels()
    if k is None:
        return False
    try:
        return _check(k)
    except Exception as err:  # any compiler or cache failure: fall back to torch
        logger.info("hf_textdp: compiled samplers unavailable (%s: %s); using torch ops", type(err).__name__, err)
        return False


def _check(k: Any) -> bool:
    probe = torch.Generator(device="cpu")
    if probe.get_state().numel() != _STATE_BYTES:
        return False
    for seed, skip, n in ((0, 0, 1), (1, 3, 623), (2**62 + 5, 311, 2000), (12345, 624, 5), (7, 1, 9000)):
        ref_g = torch.Generator(device="cpu").manual_seed(seed)
        new_g = torch.Generator(device="cpu").manual_seed(seed)
        if skip:
            torch.rand(skip, dtype=torch.float64, generator=ref_g)
            torch.rand(skip, dtype=torch.float64, generator=new_g)
        ref = torch.empty(n, dtype=torch.float64).uniform_(0.0, 1.0, generator=ref_g).numpy()
        st = TorchMT([new_g])
        got = np.empty(n, dtype=np.float64)
        k.fill_uniform(st.mt[0], st.pos[0], st.raw[0], got)
        st.store([new_g])
        if not (np.array_equal(ref, got) and torch.equal(ref_g.get_state(), new_g.get_state())):
            return False
    _warm_scan(k)
    return True


def _warm_scan(k: Any) -> None:
    """Compile (or load) ``scan_chunk`` on a tiny input, so that a failure shows here, not mid-run."""
    st = TorchMT([torch.Generator(device="cpu").manual_seed(0)])
    n = 1
    bufs = (np.empty(8, np.int64), np.empty(8, np.int64), np.empty(8, np.float64), np.empty(8, np.float64))
    prm = np.array([1.0, 1.0, np.inf, np.inf, 1e-12, 2.0**-7], dtype=np.float64)
    k.scan_chunk(
        st.mt, st.pos, st.raw, np.zeros(n, np.int64), np.zeros((n, 4), np.uint16),
        np.ones(n), np.ones(n), np.full(n, -np.inf), prm, 0, *bufs, 0, 0,
    )  # fmt: skip
