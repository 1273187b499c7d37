"""Which arithmetic is native, from CPU flags (``hf_textdp/cpu/features.py``), with fake flag sets and the
``HF_TEXTDP_CPU_ISA`` switch."""

from __future__ import annotations

from pathlib import Path

import pytest

from hf_textdp.cpu import features as F
from hf_textdp.errors import InvalidParameterError


ZEN3 = {"sse4_2", "avx", "avx2", "fma", "f16c"}  # an AVX2-only CPU (issue 41's AMD EPYC Zen 3)
ZEN4 = ZEN3 | {"avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_vnni"}
SAPPHIRE = ZEN4 | {"amx_tile", "amx_bf16", "amx_int8"}
ALDER = ZEN3 | {"avx_vnni"}  # VNNI in AVX, no AVX-512 and no bf16


@pytest.fixture(autouse=True)
def native_isa(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TEXTDP_CPU_ISA", raising=False)


@pytest.mark.parametrize(
    ("flags", "bf16", "int8"),
    [(ZEN3, False, False), (ZEN4, True, True), (SAPPHIRE, True, True), (ALDER, False, True), (set(), False, False)],
)
def test_native_arithmetic_from_flags(flags: set[str], bf16: bool, int8: bool) -> None:
    """fp32 always; bf16 with avx512_bf16 or amx_bf16; int8 with avx512_vnni, avx_vnni or amx_int8."""
    assert F.native_arithmetic(flags) == {"fp32": True, "bf16": bf16, "int8": int8}
    assert F.has_avx2_fma(flags) == ({"avx2", "fma"} <= flags)


def test_forcing_avx2_hides_avx512_and_amx(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_TEXTDP_CPU_ISA=avx2 makes an AVX-512/AMX CPU look like an AVX2 one (AVX-VNNI is not AVX-512: kept)."""
    monkeypatch.setenv("HF_TEXTDP_CPU_ISA", "avx2")
    assert F.isa_override() == "avx2"
    for flags in (ZEN4, SAPPHIRE):
        assert F.native_arithmetic(flags) == {"fp32": True, "bf16": False, "int8": False}
        assert F.has_avx2_fma(flags)
        assert not any(f.startswith(("avx512", "amx")) for f in F.effective_flags(flags))
    assert F.native_int8(ALDER)
    monkeypatch.setenv("HF_TEXTDP_CPU_ISA", " Native ")
    assert F.native_arithmetic(ZEN4)["bf16"]


def test_unknown_isa_value_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TEXTDP_CPU_ISA", "avx512")
    with pytest.raises(
        InvalidParameterError, match=r"HF_TEXTDP_CPU_ISA must be one of \['native', 'avx2'\], got 'avx512'"
    ):
        F.isa_override()


def test_cpu_flags_read_from_proc_cpuinfo() -> None:
    """On Linux the flags are /proc/cpuinfo's own line (the first processor's)."""
    info = Path("/proc/cpuinfo")
    if not info.is_file():
        pytest.skip("no /proc/cpuinfo")
    line = next(ln for ln in info.read_text().splitlines() if ln.startswith("flags"))
    assert F.cpu_flags() == frozenset(line.split(":", 1)[1].split())


def test_cpu_flags_from_torch_without_proc_cpuinfo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without /proc/cpuinfo on x86-64, torch's dispatch level gives avx2 and fma (and never bf16 or VNNI)."""
    import torch

    monkeypatch.setattr(F.Path, "read_text", lambda *a, **kw: (_ for _ in ()).throw(OSError("none")))
    monkeypatch.setattr(F.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    F.cpu_flags.cache_clear()
    try:
        assert F.cpu_flags() == {"avx2", "fma"}
        assert F.native_arithmetic() == {"fp32": True, "bf16": False, "int8": False}
    finally:
        F.cpu_flags.cache_clear()
