"""Which arithmetic this CPU has natively, read from its feature flags (not timed).

A timing taken on a shared machine can flip between runs; the flags cannot. The kernels and the bench pick
from these: the fused bf16 filter needs AVX-512 BF16, the int8 key kernel AVX-512 VNNI, and their AVX2
forms (``kernels/avx2_filter.c``, ``kernels/int8_keys_avx2.c``) need AVX2 and FMA. torch's bf16 product and
``torch._int_mm`` are emulated (many times slower) on a CPU without the matching flags, so nothing calls them
there.

The ``cpu_isa`` switch of :mod:`hf_textdp.settings` set to ``avx2`` (checked by :func:`isa_override`) makes an
AVX-512 CPU look like an AVX2 one to every choice made here: the tests run the AVX2 kernels on AVX-512 machines
with it.
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Callable, Iterable
from pathlib import Path

from .. import settings
from ..errors import InvalidParameterError


__all__ = [
    "cpu_flags",
    "effective_flags",
    "has_avx2_fma",
    "int8_kernel_kind",
    "isa_override",
    "native_arithmetic",
    "native_bf16",
    "native_int8",
]

#: flags of a native bf16 dot product (AVX-512 BF16, AMX)
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
#: flags of a native int8 dot product (VNNI in AVX-512 or AVX, AMX)
INT8_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
#: the values the cpu_isa switch takes
ISA_CHOICES = ("native", "avx2")


def isa_override() -> str:
    """The ``cpu_isa`` switch (:mod:`hf_textdp.settings`): ``"avx2"`` hides every AVX-512 and AMX flag from the
    kernels' choice, ``"native"`` (the default, also for an unset or empty value) uses the CPU's own flags.

    Raises:
        InvalidParameterError: for any other value (named with the allowed ones).
    """
    value = settings.cpu_isa()
    if value not in ISA_CHOICES:
        raise InvalidParameterError(f"{settings.CPU_ISA} must be one of {list(ISA_CHOICES)}, got {value!r}.")
    return value


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags, as Linux spells them in ``/proc/cpuinfo`` (``avx2``, ``avx512_bf16``, …).

    Without ``/proc/cpuinfo`` (macOS, Windows) the flags implied by torch's own dispatch level
    (``torch.backends.cpu.get_cpu_capability()``: ``AVX2`` gives ``avx2`` and ``fma``, ``AVX512`` adds
    ``avx512f``); bf16 and VNNI are then taken as absent, which only ever chooses a slower, exact path.
    """
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        if line.split(":")[0].strip() == "flags":
            return frozenset(line.split(":", 1)[1].split())
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return frozenset()
    import torch  # noqa: PLC0415 - only where /proc/cpuinfo is missing

    cap = torch.backends.cpu.get_cpu_capability().upper()
    flags = {"avx2", "fma"} if cap in ("AVX2", "AVX512") else set()
    if cap == "AVX512":
        flags |= {"avx512f", "avx512bw", "avx512vl", "avx512dq"}
    return frozenset(flags)


def effective_flags(flags: Iterable[str] | None = None) -> frozenset[str]:
    """``flags`` (default: :func:`cpu_flags`) as the kernels see them: without the AVX-512 and AMX ones when
    :func:`isa_override` is ``"avx2"``."""
    found = cpu_flags() if flags is None else frozenset(flags)
    if isa_override() == "avx2":
        found = frozenset(f for f in found if not f.startswith(("avx512", "amx")))
    return found


def native_bf16(flags: Iterable[str] | None = None) -> bool:
    """Whether a bf16 dot product is native (AVX-512 BF16 or AMX)."""
    return bool(effective_flags(flags) & BF16_FLAGS)


def native_int8(flags: Iterable[str] | None = None) -> bool:
    """Whether an int8 dot product is native (AVX-512 VNNI, AVX-VNNI or AMX)."""
    return bool(effective_flags(flags) & INT8_FLAGS)


def has_avx2_fma(flags: Iterable[str] | None = None) -> bool:
    """Whether the AVX2 kernels can run: AVX2 and FMA."""
    return {"avx2", "fma"} <= effective_flags(flags)


def int8_kernel_kind(loads: Callable[[str], object]) -> str | None:
    """Which of a pair of int8 kernels runs on this CPU: ``"vnni"`` where the int8 product is native
    (:func:`native_int8`) and ``loads("vnni")`` gives a built kernel, else ``"avx2"`` with AVX2 and FMA
    (:func:`has_avx2_fma`) and ``loads("avx2")``, else ``None``; never a kernel the flags do not have."""
    if native_int8() and loads("vnni") is not None:
        return "vnni"
    if has_avx2_fma() and loads("avx2") is not None:
        return "avx2"
    return None


def native_arithmetic(flags: Iterable[str] | None = None) -> dict[str, bool]:
    """Which products run natively here: ``fp32`` always, ``bf16`` with AVX-512 BF16 or AMX, ``int8`` with
    AVX-512 VNNI, AVX-VNNI or AMX (:data:`BF16_FLAGS`, :data:`INT8_FLAGS`). What the bench times: a product
    that is not native is emulated by torch and bounds nothing."""
    return {"fp32": True, "bf16": native_bf16(flags), "int8": native_int8(flags)}
