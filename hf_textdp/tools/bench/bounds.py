"""The bench's bounds: the best fp32, bf16 and int8 products shaped like the work on this machine (tokens/s
at which a product could merely score every candidate), and the CPU's model and flags.

Only the products this machine runs natively are timed (:func:`skipped_arithmetic`: bf16 and int8 from the CPU's
flags, :func:`~hf_textdp.cpu.features.native_arithmetic`; on CUDA what the device runs): torch emulates the others
many times slower, so they bound nothing and could take hours. The rows of the products come from a short
calibration (:func:`calibrate_rows`), so that a run takes minutes on a slow CPU and a fast one alike."""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable, Sequence
from typing import Literal

import torch

from ... import settings
from ...cpu import bf16_filter as fused
from ...cpu import features, int8_keys
from ...cpu.bf16_filter import fused_filter_available
from ...cpu.int8_keys import int8_keys_available
from ...search import exact_fp32_matmul


__all__ = [
    "ARITHMETICS",
    "Arithmetic",
    "BOUND_ROWS",
    "BOUND_ROWS_CUDA",
    "CPU_FLAGS",
    "bound_rows",
    "calibrate_rows",
    "cpu_info",
    "flags_used",
    "gemm_bounds",
    "skipped_arithmetic",
]


Arithmetic = Literal["fp32", "bf16", "int8"]

#: the products whose bounds every run measures, in the order they run and print
ARITHMETICS: tuple[Arithmetic, ...] = ("fp32", "bf16", "int8")

#: CPU flags that decide which products run fast (the header prints those present)
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8", "amx_tile")

#: rows of the bound products: a batch of noisy vectors scored against every candidate at once (a GPU
#: needs many more rows than a CPU to reach its rate: it privatizes batches of tens of thousands of tokens)
#: (on this 2-core AVX-512 BF16 EPYC every product ran faster at 1,024 rows than at 256 or 512: fp32 205 against
#: 181, bf16 torch.mm 822 against 754, the fused kernel 1,010 against 899, int8 2,000 against 1,699 G/s; and a
#: little faster again at 2,048: fp32 197-201 against 190-194, bf16 988-998 against 978-989, int8 1,968 against
#: 1,918-1,926 G/s; and at 4,096, the CPU search's own query block (search.FUSED_CPU_QUERIES), against 2,048:
#: fp32 196 against 191, bf16 torch.mm 880 against 869, the fused kernel 998 against 981, int8 1,983 against
#: 1,929 G/s)
BOUND_ROWS = 4096

BOUND_ROWS_CUDA = 16384

#: the fewest rows a calibrated CPU bound product takes (fewer lose the product's own rate), and the seconds
#: one fp32 product is sized to take (:func:`calibrate_rows`)
MIN_BOUND_ROWS = 256
BOUND_PRODUCT_S = 0.25


def _ceil8(n: int) -> int:
    return -(-n // 8) * 8


def _sync(device: torch.device) -> None:
    """Wait for ``device``'s queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bound_rows(device: str | torch.device) -> int:
    """Rows of the bound products on ``device`` (:data:`BOUND_ROWS`, or :data:`BOUND_ROWS_CUDA` on a GPU)."""
    return BOUND_ROWS_CUDA if torch.device(device).type == "cuda" else BOUND_ROWS


def skipped_arithmetic(device: str | torch.device = "cpu") -> dict[str, str]:
    """The arithmetics of :data:`ARITHMETICS` the bench does not time on ``device``, each with why.

    On a CPU, bf16 and int8 products run only where its flags have them natively
    (:func:`~hf_textdp.cpu.features.native_arithmetic`, which honours the ``cpu_isa`` switch); on CUDA, bf16
    where the device supports it and int8 where ``torch._int_mm`` runs. fp32 is never skipped.
    """
    dev = torch.device(device)
    out: dict[str, str] = {}
    if dev.type == "cpu":
        native = features.native_arithmetic()
        forced = (
            f" ({settings.CPU_ISA}=avx2 hides the AVX-512 and AMX ones)" if features.isa_override() == "avx2" else ""
        )
        for name, flags in (("bf16", features.BF16_FLAGS), ("int8", features.INT8_FLAGS)):
            if not native[name]:
                out[name] = (
                    f"not native on this CPU: none of {', '.join(sorted(flags))} in its flags{forced}; torch emulates "
                    "it, many times slower than fp32"
                )
    elif dev.type == "cuda" and not torch.cuda.is_bf16_supported():
        out["bf16"] = f"{torch.cuda.get_device_name(dev)} has no native bf16 product"
    if "int8" not in out and (note := _int8_note(dev)) is not None:
        out["int8"] = note
    return out


def flags_used() -> list[str]:
    """The CPU flags the kernels' choice reads (:func:`~hf_textdp.cpu.features.effective_flags`) among
    :data:`CPU_FLAGS`."""
    found = features.effective_flags()
    return [f for f in CPU_FLAGS if f in found]


def calibrate_rows(V: int, d: int, device: str | torch.device = "cpu", *, seconds: float = BOUND_PRODUCT_S) -> int:
    """Rows of the bound products on ``device``: on a CPU, as many as make one fp32 product ``rows``×d @ d×V take
    about ``seconds`` (timed on :data:`MIN_BOUND_ROWS` rows, best of three), a multiple of 64 in
    [:data:`MIN_BOUND_ROWS`, :data:`BOUND_ROWS`]; on a GPU :data:`BOUND_ROWS_CUDA`.

    A fixed 4,096 rows made one fp32 product 5 s on a 2-core AVX2 CPU (sixty per case); the sized product keeps
    most of its rate (on the loaded 2-core AVX-512 EPYC of :data:`BOUND_ROWS`: fp32 31 GFLOPS at 256 rows, 35 at
    1,024, 19 at 64).
    """
    dev = torch.device(device)
    if dev.type != "cpu":
        return bound_rows(dev)
    k, n, m = _ceil8(d), _ceil8(V), MIN_BOUND_ROWS
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(m, k, generator=g), torch.rand(k, n, generator=g)
    res = torch.empty(m, n)
    with exact_fp32_matmul():
        torch.mm(a, b, out=res)  # warm-up: the thread pool
        best = math.inf
        for _ in range(3):
            t0 = time.perf_counter()
            torch.mm(a, b, out=res)
            best = min(best, time.perf_counter() - t0)
    rows = int(seconds * m / max(best, 1e-9)) // 64 * 64
    return max(MIN_BOUND_ROWS, min(BOUND_ROWS, rows))


def _best_seconds(products: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    """Best seconds of each product over ``repeats`` round-robin runs after a warm-up (a product that fails its
    warm-up with a ``RuntimeError`` is left out)."""
    best_s: dict[str, float] = {}
    for name, run in list(products.items()):
        try:
            run()  # warm-up: thread pool, allocator, kernels
        except RuntimeError:  # e.g. no int8 kernel for this device or shape
            del products[name]
        else:
            best_s[name] = math.inf
    for _ in range(max(1, repeats)):
        for name, run in products.items():  # each product ends synchronised: the clock times that product alone
            t0 = time.perf_counter()
            run()
            best_s[name] = min(best_s[name], time.perf_counter() - t0)
    return best_s


def _native_products(
    operands: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]], timed: Sequence[str]
) -> dict[str, Callable[[], object]]:
    """The compiled kernels' products on the CPU operands, where they run: the search's fused bf16 filter and the
    sampler's int8 keys (:func:`gemm_bounds`)."""
    products: dict[str, Callable[[], object]] = {}
    a32, b32, _ = operands["fp32"]
    k, n = b32.shape
    if "bf16" in timed and fused_filter_available():
        packed = fused.PackedRows.build(b32.T.contiguous(), torch.zeros(n, dtype=torch.float64))
        q_tiles = fused.query_tiles(a32, packed.K2)
        products["bf16 fused"] = lambda: fused.block_maxima(packed, q_tiles, torch.get_num_threads())
    if "int8" in operands and int8_keys_available():
        a8, b8 = operands["int8"][0], operands["int8"][1]
        cols = torch.zeros((-(-n // int8_keys.NB) * int8_keys.NB, k), dtype=torch.int8)
        cols[:n] = b8.T
        targets = int8_keys.PackedTargets.build(cols, torch.zeros(cols.shape[0], dtype=torch.int32))
        products["int8 keys"] = lambda: int8_keys.block_key_maxima(targets, a8, torch.get_num_threads())
    return products


def gemm_bounds(
    V: int,
    d: int,
    *,
    repeats: int = 5,
    device: str | torch.device = "cpu",
    rows: int | None = None,
    sources: dict[str, float] | None = None,
    arithmetics: tuple[str, ...] | None = None,
) -> dict[str, float | None]:
    """Best ops/s of each of :data:`ARITHMETICS` on ``rows``×d @ d×V (``None``: not timed or no such product here).

    ``arithmetics`` are the ones timed, default those :func:`skipped_arithmetic` does not skip on ``device``: an
    emulated product is never run.

    fp32 and bf16 are ``torch.mm`` (fp32 under :func:`~hf_textdp.search.exact_fp32_matmul`), int8 is
    ``torch._int_mm`` (int8 × int8 → int32). Where the fused bf16 kernel of the search runs
    (:mod:`hf_textdp.cpu.bf16_filter`, AVX-512 BF16 without AMX), the bf16 bound is the faster of ``torch.mm``
    and that kernel on the same shape: the bound of the arithmetic the search really runs; likewise the
    int8 bound and the sampler's key kernel (:mod:`hf_textdp.cpu.int8_keys`, AVX-512 VNNI). All products
    run round-robin, ``repeats`` times each after a warm-up, so load from other processes reaches all of
    them. d and V are rounded up to multiples of 8 (``_int_mm`` needs it on CUDA) and the ops count that
    shape; outputs are preallocated so that no timed product pays for fresh pages. ``sources``, when
    given, receives the ops/s of each product by name (``"bf16 torch.mm"``, ``"bf16 fused kernel"``, …).

    Example:

    >>> sorted(gemm_bounds(100, 8, repeats=1, rows=16))
    ['bf16', 'fp32', 'int8']
    """
    dev = torch.device(device)
    timed = [a for a in ARITHMETICS if a not in skipped_arithmetic(dev)] if arithmetics is None else arithmetics
    m, k, n = rows or bound_rows(dev), _ceil8(d), _ceil8(V)
    g = torch.Generator().manual_seed(0)
    a32 = (torch.rand(m, k, generator=g) - 0.5).to(dev)
    b32 = (torch.rand(k, n, generator=g) - 0.5).to(dev)
    operands: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {
        "fp32": (a32, b32, torch.empty(m, n, device=dev)),
    }
    if "bf16" in timed:
        operands["bf16"] = (a32.bfloat16(), b32.bfloat16(), torch.empty(m, n, dtype=torch.bfloat16, device=dev))
    if "int8" in timed and hasattr(torch, "_int_mm"):
        a8 = torch.randint(-127, 128, (m, k), generator=g, dtype=torch.int8).to(dev)
        b8 = torch.randint(-127, 128, (k, n), generator=g, dtype=torch.int8).to(dev)
        operands["int8"] = (a8, b8, torch.empty(m, n, dtype=torch.int32, device=dev))

    def matmul(a: torch.Tensor, b: torch.Tensor, res: torch.Tensor) -> Callable[[], object]:
        if res.dtype == torch.int32:
            return lambda: torch._int_mm(a, b, out=res)
        return lambda: torch.mm(a, b, out=res)

    products = {name: matmul(*ops) for name, ops in operands.items()}
    if dev.type == "cpu":
        products.update(_native_products(operands, timed))

    def product(name: str) -> Callable[[], None]:
        def run() -> None:
            if name == "fp32":
                with exact_fp32_matmul():
                    products[name]()
            else:
                products[name]()
            _sync(dev)

        return run

    best_s = _best_seconds({name: product(name) for name in products}, repeats)
    ops = {name: 2.0 * m * k * n / t for name, t in best_s.items()}
    if sources is not None:
        sources.update({("bf16 torch.mm" if name == "bf16" else name): v for name, v in ops.items()})
    out: dict[str, float | None] = {a: ops.get(a) for a in ARITHMETICS}
    out["bf16"] = _max_of(out["bf16"], ops.get("bf16 fused"))
    out["int8"] = _max_of(out["int8"], ops.get("int8 keys"))
    return out


def _int8_note(device: str | torch.device) -> str | None:
    """Why the int8 bound cannot be measured on ``device`` (``None`` when it can)."""
    if not hasattr(torch, "_int_mm"):
        return f"torch {torch.__version__} has no torch._int_mm"
    dev = torch.device(device)
    try:
        a = torch.ones(32, 8, dtype=torch.int8, device=dev)
        torch._int_mm(a, torch.ones(8, 8, dtype=torch.int8, device=dev))
    except RuntimeError as err:
        return f"torch._int_mm fails on {dev}: {' '.join(str(err).split())[:200]}"
    return None


def _max_of(x: float | None, y: float | None) -> float | None:
    return y if x is None else x if y is None else max(x, y)


def cpu_info() -> tuple[str, list[str]]:
    """The CPU's model name and which of :data:`CPU_FLAGS` it has (Linux ``/proc/cpuinfo``; else ``platform``)."""
    model, flags = "", set[str]()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and not model:
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
                if model and flags:
                    break
    except OSError:
        pass
    return model or platform.processor() or platform.machine(), [f for f in CPU_FLAGS if f in flags]
