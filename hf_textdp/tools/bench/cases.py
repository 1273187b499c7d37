"""``hf-textdp bench``: end-to-end throughput against this machine's fp32, bf16 and int8 product bounds.

Every figure comes from one process and one run, so that it can be compared across machines as a
ratio rather than as an absolute speed:

* **bounds** — for each arithmetic (:data:`ARITHMETICS`), the best of at least five products shaped
  like the work, :data:`BOUND_ROWS` (2,048) noisy vectors against every candidate on a CPU: fp32 and bf16
  ``torch.mm`` (fp32 with TF32 and reduced-precision reductions off) and int8 ``torch._int_mm``
  (int8 × int8 → int32; skipped, with a note, where the device has none); where the search runs the
  fused bf16 kernel, the bf16 bound is the faster of ``torch.mm`` and that kernel. Each is converted to
  tokens/s as ops/(2·V·d): the rate at which that product could merely score every candidate of
  every token.
* **rate** — privatized (non-special) tokens per second through :meth:`Privatizer.privatize`, end to
  end: tokenization, classification, noise, search or sampling, decoding and accounting.
* **fractions** — rate / bound, against the fp32 bound, the bf16 bound and the bound of the
  arithmetic the case's search or sampler runs (``own``, see :func:`case_arithmetic`). Bound and
  rate measurements are interleaved: every timed pass is paired with the best of the products run
  just before and just after it, so machine noise hits both. A fraction is the best pass's rate over
  the best product of the whole case (conservative: a quiet moment lifts the bound at once, but a
  pass only on average); ``paired`` is the median over passes of rate / its own paired ``own`` bound.
* **per-token reference** (``madlib/nearest``) — one distance pass and argmin per token, the way
  per-word tools search, on noisy vectors of the same text; the ratio of the rates.
* **peak RSS** per case (the bound products excluded) and for the process, the **time to first
  output** (a cold ``hf-textdp privatize`` of 30 rows) and the peak RSS of privatizing the whole text
  file with the CLI. Both CLI runs are fresh interpreters that report their own high-water mark.

The text is SentEval MR found beside the checkout, or the file given; the bench refuses to run when
neither exists, rather than timing the packaged 30-row sample by accident (``text="sample"`` asks
for it explicitly).

Example (``--rows`` small for a quick look):

>>> from hf_textdp.tools.bench import run_bench, format_table            # doctest: +SKIP
>>> report = run_bench(mechanisms=["madlib/nearest"], rows=500)      # doctest: +SKIP
>>> print(format_table(report))                                      # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from .. import settings
from ..config import PrivatizerConfig
from ..cpu import bf16_filter as fused
from ..cpu import int8_keys
from ..cpu.bf16_filter import fused_filter_available
from ..cpu.int8_keys import int8_keys_available
from ..errors import InvalidParameterError
from ..gpu import triton_ready
from ..gpu.nearest import tensor_core_model_holds
from ..io import vectors
from ..io.models import load_space
from ..mechanisms import AdditiveMechanism, get_mechanism_class
from ..postprocess import clear_neighbour_caches
from ..privatizer import Privatizer
from ..rng import Streams, derive_row_seed, streams_for_rows
from ..search import bf16_filter_available, exact_fp32_matmul
from ..space import CANDIDATE, DEFAULT_MODEL, EmbeddingSpace


__all__ = [
    "ARITHMETICS",
    "CPU_FLAGS",
    "DEFAULT_CASES",
    "SAMPLE_TEXT",
    "BenchCase",
    "BenchReport",
    "run_bench",
    "format_table",
    "case_arithmetic",
    "cpu_info",
    "gemm_bounds",
    "load_texts",
]

#: the default mechanism × post-processing set (selection mechanisms have no post-processing)
DEFAULT_CASES = (
    "madlib/nearest",
    "madlib/top2",
    "madlib/rank",
    "laplace/nearest",
    "gaussian/nearest",
    "truncated_laplace/nearest",
    "privemb/nearest",
    "mahalanobis/nearest",
    "tem",
    "santext",
)
Arithmetic = Literal["fp32", "bf16", "int8"]
#: the products whose bounds every run measures, in the order they run and print
ARITHMETICS: tuple[Arithmetic, ...] = ("fp32", "bf16", "int8")
#: the arithmetic of each selection mechanism's sampler (the new sampler scores with an exact int8 product)
SAMPLER_ARITHMETIC: dict[str, Arithmetic] = {"tem": "int8", "santext": "int8", "santext_plus": "int8"}
#: post-processing steps that run the exact search (its filter: bf16 where exact and fast, else fp32)
SEARCH_STEPS = ("nearest", "top2", "rank", "backproject", "nearest_excluding_input")
#: the steps that search one neighbour per token (on a GPU: the fused tensor-core search)
K1_STEPS = ("nearest", "backproject")
#: CPU flags that decide which products run fast (the header prints those present)
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8", "amx_tile")
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
#: ``text=`` value that asks for the packaged 30-row sample (a path to a file named so reads ``./sample``)
SAMPLE_TEXT = "sample"
_MR_RELATIVE = Path("shared") / "data" / "senteval" / "mr.jsonl"
_PACKAGE = Path(__file__).resolve().parents[1]  # hf_textdp/
_SAMPLE = _PACKAGE / "data" / "sample.jsonl"


# --------------------------------------------------------------------------- measurements
def _ceil8(n: int) -> int:
    return -(-n // 8) * 8


def _sync(device: torch.device) -> None:
    """Wait for ``device``'s queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bound_rows(device: str | torch.device) -> int:
    """Rows of the bound products on ``device`` (:data:`BOUND_ROWS`, or :data:`BOUND_ROWS_CUDA` on a GPU)."""
    return BOUND_ROWS_CUDA if torch.device(device).type == "cuda" else BOUND_ROWS


def gemm_bounds(
    V: int,
    d: int,
    *,
    repeats: int = 5,
    device: str | torch.device = "cpu",
    rows: int | None = None,
    sources: dict[str, float] | None = None,
) -> dict[str, float | None]:
    """Best ops/s of each of :data:`ARITHMETICS` on ``rows``×d @ d×V (``None``: no such product here).

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
    m, k, n = rows or bound_rows(dev), _ceil8(d), _ceil8(V)
    g = torch.Generator().manual_seed(0)
    a32 = (torch.rand(m, k, generator=g) - 0.5).to(dev)
    b32 = (torch.rand(k, n, generator=g) - 0.5).to(dev)
    operands: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {
        "fp32": (a32, b32, torch.empty(m, n, device=dev)),
        "bf16": (a32.bfloat16(), b32.bfloat16(), torch.empty(m, n, dtype=torch.bfloat16, device=dev)),
    }
    if hasattr(torch, "_int_mm"):
        a8 = torch.randint(-127, 128, (m, k), generator=g, dtype=torch.int8).to(dev)
        b8 = torch.randint(-127, 128, (k, n), generator=g, dtype=torch.int8).to(dev)
        operands["int8"] = (a8, b8, torch.empty(m, n, dtype=torch.int32, device=dev))

    def matmul(a: torch.Tensor, b: torch.Tensor, res: torch.Tensor) -> Callable[[], object]:
        if res.dtype == torch.int32:
            return lambda: torch._int_mm(a, b, out=res)
        return lambda: torch.mm(a, b, out=res)

    products = {name: matmul(*ops) for name, ops in operands.items()}
    if dev.type == "cpu" and fused_filter_available():
        packed = fused.PackedRows.build(b32.T.contiguous(), torch.zeros(n, dtype=torch.float64))
        q_tiles = fused.query_tiles(a32, packed.K2)
        products["bf16 fused"] = lambda: fused.block_maxima(packed, q_tiles, torch.get_num_threads())
    if dev.type == "cpu" and "int8" in operands and int8_keys_available():
        a8, b8 = operands["int8"][0], operands["int8"][1]
        cols = torch.zeros((-(-n // int8_keys.NB) * int8_keys.NB, k), dtype=torch.int8)
        cols[:n] = b8.T
        targets = int8_keys.PackedTargets.build(cols, torch.zeros(cols.shape[0], dtype=torch.int32))
        products["int8 keys"] = lambda: int8_keys.block_key_maxima(targets, a8, torch.get_num_threads())

    def product(name: str) -> None:
        if name == "fp32":
            with exact_fp32_matmul():
                products[name]()
        else:
            products[name]()
        _sync(dev)

    best_s: dict[str, float] = {}
    for name in list(products):
        try:
            product(name)  # warm-up: thread pool, allocator, kernels
        except RuntimeError:  # e.g. no int8 kernel for this device or shape
            del products[name]
        else:
            best_s[name] = math.inf
    for _ in range(max(1, repeats)):
        for name in products:  # each product ends synchronised: the clock times that product alone
            t0 = time.perf_counter()
            product(name)
            best_s[name] = min(best_s[name], time.perf_counter() - t0)
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


class _RssSampler:
    """Peak resident set size of this process while a block runs, sampled every 20 ms (Linux /proc; else ru_maxrss)."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._paused = False
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def current() -> int:
        try:
            with open("/proc/self/statm", encoding="ascii") as fh:
                return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return _max_rss_bytes()

    def _sample(self) -> None:
        with self._lock:
            if not self._paused:
                self.peak = max(self.peak, self.current())

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self._sample()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Leave a block out of the peak (the bound products: their operands are not the case's memory)."""
        self._sample()
        with self._lock:
            self._paused = True
        try:
            yield
        finally:
            with self._lock:
                self._paused = False

    def __enter__(self) -> _RssSampler:
        self.peak = self.current()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def _max_rss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)  # macOS reports bytes, Linux KiB


def _mb(nbytes: float) -> float:
    return round(nbytes / 2**20, 1)


# --------------------------------------------------------------------------- inputs
def _default_text() -> Path:
    """:func:`hf_textdp.settings.bench_text`, else SentEval MR under the current directory or beside the checkout."""
    env = settings.bench_text()
    if env:
        return Path(env)
    for root in (Path.cwd(), _PACKAGE, *_PACKAGE.parents):
        for cand in (root / _MR_RELATIVE, root.parent / _MR_RELATIVE):
            if cand.is_file():
                return cand
    checkout = _PACKAGE.parent
    raise InvalidParameterError(
        f"text: SentEval MR not found at {checkout.parent / _MR_RELATIVE} (nor under the current directory); "
        "give a text file with --text FILE (text= in Python; a .jsonl with a field 'text' or one row per line), "
        f"or --text {SAMPLE_TEXT} for the packaged 30-row sample, which is not representative."
    )


def _resolve_text(text: str | os.PathLike[str] | None) -> Path:
    if isinstance(text, str) and text == SAMPLE_TEXT:
        return _SAMPLE
    path = Path(text) if text is not None else _default_text()
    if not path.is_file():
        where = "" if text is not None else f" (${settings.BENCH_TEXT})"
        raise InvalidParameterError(
            f"text: {str(path)!r}{where} is not an existing file (a .jsonl with a field 'text', or one row per "
            f"line); give another with --text FILE, or --text {SAMPLE_TEXT} for the packaged 30-row sample."
        )
    return path


def _read_rows(path: Path, *, one_word: bool) -> list[str]:
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        out = []
        for no, line in enumerate(lines, 1):
            if not line.strip():
                continue
            obj = json.loads(line)
            value = obj.get("text") if isinstance(obj, dict) else obj
            if not isinstance(value, str):
                raise InvalidParameterError(f"text: {path.name} line {no} has no string field 'text'.")
            out.append(value)
    else:
        out = [line for line in lines if line.strip()]
    if one_word:
        out = [w for t in out for w in t.split()]
    if not out:
        raise InvalidParameterError(f"text: {path.name} holds no rows.")
    return out


def _is_sample(path: Path) -> bool:
    return path.resolve() == _SAMPLE


def _text_detail(file_rows: int, used: int, *, one_word: bool, sample: bool) -> str:
    unit = "words (one per row)" if one_word else "rows"
    use = f"first {used:,}" if used <= file_rows else f"cycled {used / file_rows:.1f} times to {used:,} rows"
    return f"{file_rows:,} {unit}, {use}" + ("; THE PACKAGED 30-ROW SAMPLE, not representative" if sample else "")


def _load(text: str | os.PathLike[str] | None, rows: int | None, one_word: bool) -> tuple[Path, int, list[str], str]:
    """(the file, its rows, ``rows`` of them cycling through the file, their description)."""
    path = _resolve_text(text)
    out = _read_rows(path, one_word=one_word)
    file_rows = len(out)
    if rows is not None:
        out = [out[i % file_rows] for i in range(rows)]
    detail = _text_detail(file_rows, len(out), one_word=one_word, sample=_is_sample(path))
    return path, file_rows, out, f"{path.name} ({detail})"


def load_texts(
    text: str | os.PathLike[str] | None = None, rows: int | None = 4000, *, one_word: bool = False
) -> tuple[list[str], str]:
    """Rows of text for the bench and a description of where they came from.

    Args:
        text (`str`, *optional*): a .jsonl file (field ``text``) or a plain text file (one row per
            line), or ``"sample"`` (:data:`SAMPLE_TEXT`) for the packaged 30-row sample. Default:
            :data:`hf_textdp.settings.BENCH_TEXT`, else SentEval MR (``shared/data/senteval/mr.jsonl`` under the
            current directory or beside the checkout).
        rows (`int`, *optional*, defaults to 4000): rows to use (cycling through the file when it is
            shorter; the description says so); ``None`` for the whole file.
        one_word (`bool`, defaults to `False`): make every row a single whitespace word of the text.

    Raises:
        InvalidParameterError: the file is missing or holds no rows, or no ``text`` was given and
            SentEval MR is not found (the bench never falls back to the sample on its own).
    """
    if rows is not None and rows < 1:
        raise InvalidParameterError(f"rows must be an int >= 1, got {rows}.")
    _, _, out, source = _load(text, rows, one_word)
    return out, source


def _parse_case(case: str) -> tuple[str, str]:
    mech, _, post = case.partition("/")
    cls = get_mechanism_class(mech)  # raises, listing the registered names
    if cls.kind == "selection":
        if post and post != "nearest":
            raise InvalidParameterError(
                f"mechanism: {mech!r} is a selection mechanism and takes no post-processing, got {case!r}."
            )
        return mech, "nearest"
    return mech, post or "nearest"


def case_arithmetic(case: str, space: EmbeddingSpace) -> Arithmetic:
    """The arithmetic whose product bound ``case`` is held to (the ``own`` column).

    Additive mechanisms with a search step run the exact search, whose filter is bf16 where
    :func:`~hf_textdp.search.bf16_filter_available` says so and fp32 elsewhere; selection mechanisms
    run their sampler's arithmetic (:data:`SAMPLER_ARITHMETIC`); a step with no product (``vector``)
    is held to fp32.
    """
    mech, post = _parse_case(case)
    if get_mechanism_class(mech).kind == "selection":
        return SAMPLER_ARITHMETIC.get(mech, "fp32")
    if post in SEARCH_STEPS:
        if post in K1_STEPS and triton_ready(space.device) and tensor_core_model_holds(space.device):
            return "bf16"  # the fused GPU search: bf16 tensor cores (where they pass the bound's model check)
        return "bf16" if bf16_filter_available(space.device) else "fp32"
    return "fp32"


# --------------------------------------------------------------------------- records
@dataclass
class BenchCase:
    """One mechanism × post-processing, measured (fractions are ``None`` where a bound is missing)."""

    name: str
    mechanism: str
    postprocess: str
    epsilon: float
    arithmetic: str = "fp32"
    tokens: int = 0
    seconds: float = 0.0
    tokens_per_s: float = 0.0
    bound_tokens_per_s: dict[str, float | None] = field(default_factory=dict)
    fraction_fp32: float | None = None
    fraction_bf16: float | None = None
    fraction_int8: float | None = None
    fraction_own: float | None = None
    fraction_paired: float | None = None
    peak_rss_mb: float = 0.0
    search_filter: str | None = None
    ops_per_token: float = 0.0  # 2·n·m averaged over the tokens (work_per_token)
    searched: str = ""
    rounds: list[dict[str, float | None]] = field(default_factory=list)
    per_token_reference: dict[str, Any] | None = None
    kernel: dict[str, Any] | None = None  # the device part alone (GPU runs): tokens/s, fractions, fallbacks
    error: str | None = None


@dataclass
class BenchReport:
    """Everything ``hf-textdp bench`` measured, with the machine it ran on.

    ``bounds`` maps each of :data:`ARITHMETICS` to ``{"ops_per_s", "tokens_per_s", "note"}``, the best
    product of the whole run (``None`` rates and a ``note`` where that product cannot run);
    ``bound_sources`` the ops/s of each product of the first bound measurement by name, where the bf16
    bound takes the faster of two (``torch.mm`` and the search's fused kernel).
    """

    model: str
    device: str
    text: str
    text_path: str
    text_file_rows: int
    text_is_sample: bool
    one_word: bool
    rows: int
    V: int
    d: int
    threads: int
    torch_version: str
    machine: str
    cpu_model: str
    cpu_flags: list[str]
    bound_shape: list[int]
    bounds: dict[str, dict[str, Any]]
    cases: list[BenchCase]
    peak_rss_mb: float
    repeats: int = 3
    cold_start: dict[str, Any] | None = None
    memory_run: dict[str, Any] | None = None
    model_load_s: float | None = None
    vector_load: dict[str, Any] | None = None
    bound_sources: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- the run
def work_per_token(priv: Privatizer, texts: Sequence[str]) -> tuple[float, str]:
    """Operations (2 per multiply-add) a privatized token of ``texts`` costs the product it runs, and the shapes.

    A token is scored against every row of its piece class's search index (additive mechanisms: the
    index ``nearest`` searches, projected for privemb, transformed with a bound) or of its class's space
    (samplers), in that index's dimension: 2·n_c·m_c, averaged over the tokens by class. The shapes
    read ``n×m (share of tokens)``.
    """
    space = priv.space
    pairs = priv.class_mechanisms
    shapes = []
    for part, mech in pairs:
        index = mech.search_index(part.space) if isinstance(mech, AdditiveMechanism) else part.space
        shapes.append((part.index, int(index.V), int(index.d)))
    positions = _candidate_positions(priv, texts)
    # one released space (no classes, or a class too small to stand alone): every token scores it
    of_class = space.position_class()[positions] if len(shapes) > 1 else np.full(positions.size, shapes[0][0])
    counts = np.bincount(of_class, minlength=max(c for c, _, _ in shapes) + 1)
    total = int(counts.sum())
    if total == 0:  # no privatized token: the largest class's shape
        return max(2.0 * n * m for _, n, m in shapes), ", ".join(f"{n:,}x{m}" for _, n, m in shapes)
    ops = sum(2.0 * n * m * int(counts[c]) for c, n, m in shapes) / total
    return ops, ", ".join(f"{n:,}x{m} ({counts[c] / total:.0%})" for c, n, m in shapes)


def _candidate_rows(priv: Privatizer, texts: Sequence[str]) -> list[np.ndarray]:
    """The candidate positions of each row's privatized tokens, in order (int64)."""
    assert priv._tokens is not None  # set up by the warm-up call
    parts = []
    for r in priv._tokens.encode(list(texts)):
        cls, p = priv.space.classify(r.ids)
        parts.append(p[cls == CANDIDATE])
    return parts


def _candidate_positions(priv: Privatizer, texts: Sequence[str]) -> np.ndarray:
    """The candidate positions of the privatized tokens of ``texts``, in order (int64)."""
    parts = _candidate_rows(priv, texts)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _per_token_reference(priv: Any, texts: Sequence[str], n_tokens: int) -> dict[str, Any]:
    """Per-word-tool search (one fp32 distance pass + argmin per token) on madlib's noisy vectors."""
    space, mech = priv.space, priv.mechanism
    pos_t = torch.from_numpy(_candidate_positions(priv, texts[:200])[:n_tokens])
    st = streams_for_rows([derive_row_seed(0, 0, "bench-reference", 0)], [int(pos_t.numel())], space.device)
    Z = mech.perturb(mech.inputs(space, pos_t), st)
    index = mech.search_index(space)
    E = index.E
    ref = torch.empty(Z.shape[0], dtype=torch.int64)
    t0 = time.perf_counter()
    for i in range(Z.shape[0]):
        ref[i] = int(((E - Z[i]) ** 2).sum(1).argmin())
    dt = time.perf_counter() - t0
    exact = index.search(Z, 1)[:, 0]
    return {
        "tokens": int(Z.shape[0]),
        "tokens_per_s": Z.shape[0] / dt,
        "agreement": float((exact == ref).double().mean()),
    }


def device_inputs(priv: Privatizer, texts: Sequence[str]) -> tuple[torch.Tensor, Streams]:
    """What :meth:`Privatizer.release_streams` takes for ``texts`` as rows 0 … n − 1: every privatized token's
    candidate position (on CPU) and the rows' keyed streams (on the privatizer's device)."""
    parts = _candidate_rows(priv, texts)
    positions = torch.from_numpy(np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))
    streams = streams_for_rows(priv.row_keys(range(len(texts))), [int(p.size) for p in parts], priv.space.device)
    return positions, streams


def _search_indexes(priv: Privatizer) -> list[Any]:
    """The exact-search indexes a privatizer's classes search (none for selection mechanisms)."""
    return [
        mech.search_index(part.space) for part, mech in priv.class_mechanisms if isinstance(mech, AdditiveMechanism)
    ]


def _kernel_pass(priv: Privatizer, texts: Sequence[str], repeats: int) -> dict[str, Any]:
    """Tokens/s of the device part alone: noise and search (or sampling) of all ``texts``' tokens in one call.

    Tokenization, key derivation and decoding happen before the clock starts; the clock stops when the
    released positions are back on the host. ``fallback_queries`` counts the tokens the fused GPU search
    handed to the generic search in the timed passes (near-ties, overflowing candidate lists).
    """
    positions, streams = device_inputs(priv, texts)
    dev = priv.space.device
    priv.release_streams(positions, streams)  # warm-up: kernels compiled, operands prepared
    indexes = _search_indexes(priv)
    before = sum(getattr(ix, "fallback_queries", 0) for ix in indexes)
    best = math.inf
    for _ in range(max(1, repeats)):
        _sync(dev)
        t0 = time.perf_counter()
        priv.release_streams(positions, streams)
        _sync(dev)
        best = min(best, time.perf_counter() - t0)
    fallbacks = sum(getattr(ix, "fallback_queries", 0) for ix in indexes) - before
    n = int(positions.numel())
    return {"tokens": n, "seconds": best, "tokens_per_s": n / best, "fallback_queries": fallbacks, "passes": repeats}


def _run_case(
    case: str,
    *,
    model: str,
    device: str,
    epsilon: float,
    texts: Sequence[str],
    batch_size: int,
    repeats: int,
    bound_repeats: int,
    seed: int,
    reference_tokens: int,
    kernel_only: bool = False,
) -> BenchCase:
    mech_name, post = _parse_case(case)
    out = BenchCase(name=case, mechanism=mech_name, postprocess=post, epsilon=epsilon)
    cfg = PrivatizerConfig(mechanism=mech_name, epsilon=epsilon, model=model, postprocess=post, device=device)
    # public benchmark text with a public seed: not a privacy key, so a small seed is fine here
    priv = Privatizer(cfg, seed=seed, split="bench", allow_weak_seed=True)
    priv.privatize(list(texts[:16]))  # warm-up: load, set up, scale statistics (cached), first kernels
    mech = priv.mechanism
    out.arithmetic = case_arithmetic(case, priv.space)
    if mech.kind == "additive":  # selection mechanisms sample; they run no search
        index = mech.search_index(priv.space)  # type: ignore[attr-defined]
        if post in K1_STEPS and index._use_tensor_cores():
            out.search_filter = "bf16tc"  # the fused filter on tensor cores (gpu/nearest.py)
        else:
            out.search_filter = "bf16" if index._use_bf16() else "fp32"
    elif getattr(mech, "sampler", None) == "dense":  # the exact sampler's bound is an int8 product
        out.search_filter = "int8"
    V, d = priv.space.V, priv.space.d
    per_op, out.searched = work_per_token(priv, texts)
    out.ops_per_token = per_op
    best_rate = 0.0
    best_bound: dict[str, float | None] = dict.fromkeys(ARITHMETICS)
    with _RssSampler() as rss:
        for _ in range(max(1, repeats)):
            # every pass starts cold: a repeat of the same rows must not gain from neighbours searched for
            # them (a whole neighbour table, public set-up like the scale statistics, is read back instead)
            clear_neighbour_caches()
            with rss.paused():  # the products' operands are the bench's memory, not the case's
                before = gemm_bounds(V, d, repeats=bound_repeats, device=device)
            start_tokens = priv.totals.dp_tokens
            t0 = time.perf_counter()
            for s in range(0, len(texts), batch_size):
                priv.privatize(list(texts[s : s + batch_size]), row_ids=range(s, min(s + batch_size, len(texts))))
            dt = time.perf_counter() - t0  # privatize returns host lists: the device work is done
            tokens = priv.totals.dp_tokens - start_tokens
            with rss.paused():
                after = gemm_bounds(V, d, repeats=bound_repeats, device=device)
            rate = tokens / dt
            paired = {a: _max_of(before[a], after[a]) for a in ARITHMETICS}
            bound = {a: (None if ops is None else ops / per_op) for a, ops in paired.items()}
            own = bound[out.arithmetic]
            out.rounds.append(
                {"tokens_per_s": rate}
                | {f"bound_{a}_tokens_per_s": bound[a] for a in ARITHMETICS}
                | {"fraction_own": None if own is None else rate / own}
            )
            out.tokens, out.seconds = tokens, dt
            best_rate = max(best_rate, rate)
            best_bound = {a: _max_of(best_bound[a], bound[a]) for a in ARITHMETICS}
    out.tokens_per_s = best_rate
    out.bound_tokens_per_s = best_bound
    # conservative: the best pass over the best product seen in the case
    fraction = {a: (None if b is None else best_rate / b) for a, b in best_bound.items()}
    out.fraction_fp32, out.fraction_bf16, out.fraction_int8 = fraction["fp32"], fraction["bf16"], fraction["int8"]
    out.fraction_own = fraction[out.arithmetic]
    paired_fractions = sorted(f for r in out.rounds if (f := r["fraction_own"]) is not None)
    if paired_fractions:  # median round (upper median for an even count)
        out.fraction_paired = paired_fractions[len(paired_fractions) // 2]
    out.peak_rss_mb = _mb(rss.peak)
    if kernel_only:
        out.kernel = _kernel_pass(priv, texts, repeats)
        own_ops = out.bound_tokens_per_s[out.arithmetic]
        out.kernel |= {
            f"fraction_{a}": None if b is None else out.kernel["tokens_per_s"] / b for a, b in best_bound.items()
        } | {"fraction_own": None if own_ops is None else out.kernel["tokens_per_s"] / own_ops}
    if mech_name == "madlib" and post == "nearest" and reference_tokens > 0:
        ref = _per_token_reference(priv, texts, reference_tokens)
        ref["ratio"] = best_rate / ref["tokens_per_s"]
        out.per_token_reference = ref
    return out


def _cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("HF_DATASETS_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
    return env


#: ``python -c _LAUNCHER PEAK_FILE ARGS``: runs ``hf-textdp ARGS`` and, at exit, writes the process's own
#: peak RSS to PEAK_FILE. It reads VmHWM, the high-water mark of the memory map, which exec starts
#: empty. ru_maxrss cannot serve (getrusage of the child itself, wait4 on its pid, or RUSAGE_CHILDREN):
#: on Linux, exec folds the high-water mark of the map it replaces — the bench's own, through
#: subprocess's vfork — into the child's ru_maxrss, so every child would report at least the bench's peak.
_LAUNCHER = """\
import atexit, json, resource, runpy, sys
peak_file = sys.argv.pop(1)
def _write_peak():
    try:
        with open('/proc/self/status', encoding='ascii') as fh:
            kib = next(int(line.split()[1]) for line in fh if line.startswith('VmHWM:'))
        peak, source = kib * 1024, 'VmHWM'
    except (OSError, StopIteration, ValueError, IndexError):
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak, source = (rss if sys.platform == 'darwin' else rss * 1024), 'ru_maxrss'
    with open(peak_file, 'w', encoding='utf-8') as fh:
        json.dump({'peak_rss_bytes': peak, 'source': source}, fh)
atexit.register(_write_peak)
runpy.run_module('hf_textdp.cli', run_name='__main__', alter_sys=True)
"""


def _run_cli(args: list[str], timeout: float) -> dict[str, Any]:
    """Run ``hf-textdp ARGS`` in a fresh interpreter: wall seconds, exit code and the child's own peak RSS.

    ``peak_rss_mb`` is ``None`` when the child did not reach its exit handlers (killed, timed out);
    ``peak_rss_source`` says how it was read (``VmHWM`` on Linux, else the child's ru_maxrss).
    """
    with tempfile.TemporaryDirectory(prefix="hf_textdp_bench_rss_") as tmp:
        peak_file = Path(tmp) / "peak.json"
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, str(peak_file), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_cli_env(),
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        wall = time.perf_counter() - t0
        try:
            peak: dict[str, Any] | None = json.loads(peak_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            peak = None
    result: dict[str, Any] = {
        "seconds": wall,
        "returncode": proc.returncode,
        "peak_rss_mb": None if peak is None else _mb(peak["peak_rss_bytes"]),
        "peak_rss_source": None if peak is None else peak["source"],
    }
    if proc.returncode != 0:
        result["error"] = (stderr.decode("utf-8", "replace").strip().splitlines() or ["?"])[-1][:300]
    else:
        result["output"] = stdout.decode("utf-8", "replace").strip()[:300]
    return result


def _vector_load(path: Path) -> dict[str, Any]:
    """Reading a vector file once (bytes), parsing it (cache off) and loading it from the parse cache."""
    t0 = time.perf_counter()
    path.read_bytes()
    read_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    vec = vectors.read_vectors(path, cache=False)
    parse_s = time.perf_counter() - t0
    vectors.read_vectors(path, cache=True)  # make sure the cache holds it
    t0 = time.perf_counter()
    vectors.read_vectors(path, cache=True)
    cached_s = time.perf_counter() - t0
    return {
        "file_mb": _mb(path.stat().st_size),
        "rows": len(vec.words),
        "d": int(vec.matrix.shape[1]),
        "read_s": read_s,
        "parse_s": parse_s,
        "cached_s": cached_s,
    }


def _privatize_cli(
    rows: Sequence[str] | Path, model: str, device: str, epsilon: float, timeout: float
) -> dict[str, Any]:
    """``hf-textdp privatize`` of ``rows`` (or a .jsonl file) in a fresh interpreter (seed 1), as :func:`_run_cli`."""
    with tempfile.TemporaryDirectory(prefix="hf_textdp_bench_") as tmp:
        src = rows if isinstance(rows, Path) else Path(tmp) / "in.jsonl"
        if not isinstance(rows, Path):
            src.write_text("".join(json.dumps({"text": t}) + "\n" for t in rows), encoding="utf-8")
        argv = ["privatize", str(src), str(Path(tmp) / "out.jsonl"), "--epsilon", str(epsilon), "--model", model]
        # public benchmark text with a public seed: not a privacy key
        return _run_cli([*argv, "--device", device, "--seed", "1", "--allow-weak-seed"], timeout=timeout)


def run_bench(
    *,
    model: str = DEFAULT_MODEL,
    mechanisms: Sequence[str] | None = None,
    device: str = "cpu",
    text: str | os.PathLike[str] | None = None,
    rows: int = 4000,
    epsilon: float = 10.0,
    batch_size: int = 1000,
    repeats: int = 3,
    bound_repeats: int = 5,
    one_word: bool = False,
    reference_tokens: int = 200,
    cold_start: bool = True,
    memory_run: bool = False,
    seed: int = 0,
    kernel_only: bool | None = None,
    progress: Callable[[str], None] | None = None,
) -> BenchReport:
    """Measure every case of ``mechanisms`` (default :data:`DEFAULT_CASES`); see the module docstring.

    Args:
        model (`str`): as ``PrivatizerConfig.model`` (a vector file path benches static vectors).
        mechanisms (`list[str]`, *optional*): cases ``"mechanism"`` or ``"mechanism/postprocess"``.
        device (`str`, defaults to `"cpu"`): ``"cpu"`` or ``"cuda[:N]"``.
        text (`str`, *optional*): the text file, or ``"sample"`` (see :func:`load_texts`); without it,
            SentEval MR, and an error when MR is not found.
        rows (`int`, defaults to 4000): rows privatized per timed pass.
        epsilon (`float`, defaults to 10.0): ε of every case (throughput barely depends on it).
        batch_size (`int`, defaults to 1000): rows per ``privatize`` call (``Dataset.map``'s default).
        repeats (`int`, defaults to 3): timed passes per case (the best counts; ``paired`` is the median).
        bound_repeats (`int`, defaults to 5): products of each arithmetic per bound measurement (two
            measurements per pass).
        one_word (`bool`, defaults to `False`): one whitespace word per row (per-row overhead).
        reference_tokens (`int`, defaults to 200): tokens for the per-token reference (0: skip).
        cold_start (`bool`, defaults to `True`): time a cold CLI run on 30 rows (a fresh interpreter).
        memory_run (`bool`, defaults to `False`): privatize the whole text file with the CLI in a
            fresh interpreter and report its peak RSS.
        seed (`int`, defaults to 0): the privatizers' seed (bench outputs are thrown away).
        kernel_only (`bool`, *optional*): also time the device part alone (noise and search or sampling of
            all the rows' tokens in one call, no tokenizing or decoding); default: on a GPU only.
        progress (`callable`, *optional*): called with a line after each step.

    Raises:
        InvalidParameterError: a count below 1, an unknown case, or no text (see :func:`load_texts`).
    """
    if rows < 1 or batch_size < 1 or repeats < 1 or bound_repeats < 1:
        raise InvalidParameterError(
            f"rows, batch_size, repeats and bound_repeats must be >= 1, got {rows}, {batch_size}, {repeats}, "
            f"{bound_repeats}."
        )
    cases = list(mechanisms) if mechanisms else list(DEFAULT_CASES)
    for c in cases:
        _parse_case(c)
    note = progress or (lambda line: None)
    text_path, file_rows, texts, source = _load(text, rows, one_word)
    if _is_sample(text_path):
        note(f"text: {source}")
    t0 = time.perf_counter()
    space = load_space(model, device)
    load_s = time.perf_counter() - t0
    V, d = space.V, space.d
    per_op = 2.0 * V * d
    sources: dict[str, float] = {}
    best_ops = gemm_bounds(V, d, repeats=bound_repeats, device=device, sources=sources)
    results: list[BenchCase] = []
    for c in cases:
        try:
            res = _run_case(
                c,
                model=model,
                device=device,
                epsilon=epsilon,
                texts=texts,
                batch_size=batch_size,
                repeats=repeats,
                bound_repeats=bound_repeats,
                seed=seed,
                reference_tokens=reference_tokens,
                kernel_only=torch.device(device).type == "cuda" if kernel_only is None else kernel_only,
            )
        except Exception as err:  # noqa: BLE001 - one failing case must not hide the others
            res = BenchCase(
                name=c,
                mechanism=c.partition("/")[0],
                postprocess=c.partition("/")[2] or "nearest",
                epsilon=epsilon,
                error=f"{type(err).__name__}: {' '.join(str(err).split())[:300]}",
            )
        results.append(res)
        for a, tps in res.bound_tokens_per_s.items():
            best_ops[a] = _max_of(best_ops[a], None if tps is None else tps * res.ops_per_token)
        note(_case_line(res))
    int8_note = _int8_note(device) if best_ops["int8"] is None else None
    bounds: dict[str, dict[str, Any]] = {
        a: {
            "ops_per_s": ops,
            "tokens_per_s": None if ops is None else ops / per_op,
            "note": int8_note if a == "int8" else None if ops is not None else "the product failed on this device",
        }
        for a, ops in best_ops.items()
    }
    cpu_model, cpu_flags = cpu_info()
    machine = f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPUs"
    if torch.device(device).type == "cuda":
        machine += f"; {torch.cuda.get_device_name(torch.device(device))}"
    report = BenchReport(
        model=model,
        device=device,
        text=source,
        text_path=str(text_path),
        text_file_rows=file_rows,
        text_is_sample=_is_sample(text_path),
        one_word=one_word,
        rows=len(texts),
        V=V,
        d=d,
        threads=torch.get_num_threads(),
        torch_version=torch.__version__,
        machine=machine,
        cpu_model=cpu_model,
        cpu_flags=cpu_flags,
        bound_shape=[bound_rows(device), _ceil8(d), _ceil8(V)],
        bounds=bounds,
        cases=results,
        peak_rss_mb=_mb(_max_rss_bytes()),
        repeats=repeats,
        model_load_s=load_s,
        bound_sources=sources,
    )
    if Path(model).is_file():
        report.vector_load = _vector_load(Path(model))
        note(f"vector file: read {report.vector_load['read_s']:.2f} s, parse {report.vector_load['parse_s']:.2f} s")
    if cold_start:
        report.cold_start = _privatize_cli(texts[:30], model, device, epsilon, timeout=600) | {"rows": min(30, rows)}
        note(f"cold start: {report.cold_start['seconds']:.2f} s")
    if memory_run:
        whole = (
            text_path if text_path.suffix.lower() in (".jsonl", ".ndjson") else _read_rows(text_path, one_word=False)
        )
        report.memory_run = _privatize_cli(whole, model, device, epsilon, timeout=3600) | {"text": text_path.name}
        note(f"memory run: peak RSS {report.memory_run['peak_rss_mb']} MB")
    return report


# --------------------------------------------------------------------------- output
def _frac(x: float | None, width: int) -> str:
    return f"{'-':>{width}s}" if x is None else f"{x:>{width}.2f}"


def _case_line(c: BenchCase) -> str:
    if c.error:
        return f"{c.name}: error: {c.error}"
    parts = [f"{c.fraction_fp32:.2f} of fp32" if c.fraction_fp32 is not None else "no fp32 bound"]
    parts.append(f"{c.fraction_bf16:.2f} of bf16" if c.fraction_bf16 is not None else "no bf16 bound")
    own = f"{c.fraction_own:.2f}" if c.fraction_own is not None else "-"
    return f"{c.name}: {c.tokens_per_s:,.0f} tokens/s, {', '.join(parts)}, {own} of its own ({c.arithmetic})"


def format_table(report: BenchReport) -> str:
    """The report as a fixed-width table with its header lines."""
    m, k, n = report.bound_shape
    absent = [f for f in CPU_FLAGS if f not in report.cpu_flags]
    flags = " ".join(report.cpu_flags) or "none"
    text = _text_detail(report.text_file_rows, report.rows, one_word=report.one_word, sample=report.text_is_sample)
    lines = [
        f"model {report.model} (V = {report.V:,}, d = {report.d}) on {report.device}",
        f"text {report.text_path} ({text}); {report.repeats} timed passes per case",
        f"cpu {report.cpu_model} ({report.machine}); flags {flags}" + (f", not {' '.join(absent)}" if absent else ""),
        f"torch {report.torch_version}, {report.threads} threads",
        f"bounds: best {m}x{k} @ {k}x{n} products of the run; here tokens/s = ops/s / (2 V d); each case divides "
        "by its own 2 n m (the rows n and dimension m its tokens score, by piece class: the searched column)",
    ]
    for a, b in report.bounds.items():
        if b["ops_per_s"] is None:
            lines.append(f"  {a:5s} not measured: {b['note']}")
        else:
            unit = "GOPS  " if a == "int8" else "GFLOPS"
            lines.append(f"  {a:5s} {b['ops_per_s'] / 1e9:>9,.0f} {unit} = {b['tokens_per_s']:>12,.0f} tokens/s")
    src = report.bound_sources
    if "bf16 fused" in src:
        lines.append(
            f"  (bf16: the faster of torch.mm, {src.get('bf16 torch.mm', 0) / 1e9:,.0f} GFLOPS, and the search's "
            f"fused kernel, {src['bf16 fused'] / 1e9:,.0f} GFLOPS, in the first measurement)"
        )
    if "int8 keys" in src:
        lines.append(
            f"  (int8: the faster of torch._int_mm, {src.get('int8', 0) / 1e9:,.0f} GOPS, and the sampler's key "
            f"kernel, {src['int8 keys'] / 1e9:,.0f} GOPS, in the first measurement)"
        )
    lines += [
        "",
        f"{'case':26s} {'arith':>5s} {'filter':>6s} {'tokens':>9s} {'tokens/s':>10s} {'fp32':>6s} {'bf16':>6s} "
        f"{'own':>6s} {'paired':>6s} {'peak RSS':>9s}",
    ]
    for c in report.cases:
        if c.error:
            lines.append(f"{c.name:26s} error: {c.error}")
            continue
        lines.append(
            f"{c.name:26s} {c.arithmetic:>5s} {c.search_filter or '-':>6s} {c.tokens:>9,d} {c.tokens_per_s:>10,.0f} "
            f"{_frac(c.fraction_fp32, 6)} {_frac(c.fraction_bf16, 6)} {_frac(c.fraction_own, 6)} "
            f"{_frac(c.fraction_paired, 6)} {c.peak_rss_mb:>6,.0f} MB"
        )
    lines.append(
        "(fp32, bf16, own: best pass over the best product of that arithmetic in the case; own = the arith column; "
        "paired: median pass over its own paired bound)"
    )
    lines += [f"  searched by {c.name}: {c.searched}" for c in report.cases if c.searched and not c.error]
    kernels = [c for c in report.cases if c.kernel and not c.error]
    if kernels:
        lines += [
            "",
            "kernel only (noise and search or sampling of all the rows' tokens in one call, results back on the host; "
            "no tokenizing, key derivation or decoding):",
            f"{'case':26s} {'tokens':>9s} {'tokens/s':>12s} {'fp32':>6s} {'bf16':>6s} {'own':>6s} {'fallbacks':>9s}",
        ]
        for c in kernels:
            kr: dict[str, Any] = c.kernel or {}
            lines.append(
                f"{c.name:26s} {kr['tokens']:>9,d} {kr['tokens_per_s']:>12,.0f} {_frac(kr.get('fraction_fp32'), 6)} "
                f"{_frac(kr.get('fraction_bf16'), 6)} {_frac(kr.get('fraction_own'), 6)} {kr['fallback_queries']:>9,d}"
            )
    lines.append("")
    for c in report.cases:
        ref = c.per_token_reference
        if ref:
            lines.append(
                f"per-token reference ({c.name}): {ref['tokens_per_s']:,.1f} tokens/s over {ref['tokens']} tokens; "
                f"ratio {ref['ratio']:,.0f}x; same answers on {ref['agreement']:.1%}"
            )
    lines.append(f"peak RSS (this process): {report.peak_rss_mb:,.0f} MB; model load {report.model_load_s or 0:.2f} s")
    if report.vector_load:
        vl = report.vector_load
        lines.append(
            f"vector file ({vl['file_mb']:,.0f} MB, {vl['rows']:,} x {vl['d']}): read once {vl['read_s']:.2f} s, "
            f"parse {vl['parse_s']:.2f} s, from the parse cache {vl['cached_s']:.2f} s"
        )
    cli_runs = {
        "time to first output (cold CLI, {rows} rows)": report.cold_start,
        "CLI on all of {text}": report.memory_run,
    }
    for what, run in cli_runs.items():
        if run:
            rss = "?" if run["peak_rss_mb"] is None else f"{run['peak_rss_mb']:,.0f} MB"
            status = "" if run["returncode"] == 0 else f" (exit {run['returncode']}: {run.get('error')})"
            lines.append(f"{what.format(**run)}: {run['seconds']:.2f} s, peak RSS {rss} (its own){status}")
    return "\n".join(lines)
