"""``hf-textdp bench``: end-to-end throughput against this machine's fp32 matrix-product bound.

Every figure comes from one process and one run, so that it can be compared across machines as a
ratio rather than as an absolute speed:

* **bound** — the best of at least five fp32 torch products 2048×2048 @ 2048×2048 (default threads),
  as FLOPS, converted to tokens/s as FLOPS/(2·V·d): the rate at which an fp32 product could merely
  score every candidate of every token.
* **rate** — privatized (non-special) tokens per second through :meth:`Privatizer.privatize`, end to
  end: tokenization, classification, noise, search or sampling, decoding and accounting.
* **fraction of bound** — rate / bound. Bound and rate measurements are interleaved: every timed
  pass is paired with the best of the products run just before and just after it, so machine noise
  hits both. ``fraction`` is the best pass's rate over the best product of the whole case
  (conservative: a quiet moment lifts the bound at once, but a pass only on average); ``paired`` is
  the median over passes of rate / its own paired bound.
* **per-token reference** (``madlib/nearest``) — one distance pass and argmin per token, the way
  per-word tools search, on noisy vectors of the same text; the ratio of the rates.
* **peak RSS** per case and for the process, the **time to first output** (a cold ``hf-textdp
  privatize`` of 30 rows, as a subprocess) and the peak RSS of privatizing the whole text file with
  the CLI (a subprocess).

Example (``--rows`` small for a quick look):

>>> from hf_textdp.bench import run_bench, format_table            # doctest: +SKIP
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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from .errors import InvalidParameterError
from .mechanisms import get_mechanism_class
from .space import DEFAULT_MODEL


__all__ = [
    "DEFAULT_CASES",
    "BenchCase",
    "BenchReport",
    "run_bench",
    "format_table",
    "matmul_bound",
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
_MR_RELATIVE = Path("shared") / "data" / "senteval" / "mr.jsonl"
_SAMPLE = Path(__file__).resolve().parent / "data" / "sample.jsonl"


# --------------------------------------------------------------------------- measurements
def matmul_bound(repeats: int = 5, n: int = 2048, device: str | torch.device = "cpu") -> float:
    """Best FLOPS of ``repeats`` fp32 products n×n @ n×n on ``device`` (default threads, TF32 and bf16 off)."""
    from .search import exact_fp32_matmul

    dev = torch.device(device)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(dev)
    b = torch.randn(n, n, generator=g).to(dev)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    best = math.inf
    with exact_fp32_matmul():
        torch.mm(a, b)  # warm-up: thread pool, allocator, kernels
        sync()
        for _ in range(max(1, repeats)):
            t0 = time.perf_counter()
            torch.mm(a, b)
            sync()
            best = min(best, time.perf_counter() - t0)
    return 2.0 * n**3 / best


class _RssSampler:
    """Peak resident set size of this process while a block runs (Linux /proc; else ru_maxrss)."""

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def current() -> int:
        try:
            with open("/proc/self/statm", encoding="ascii") as fh:
                return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return _max_rss_bytes()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.current())
            self._stop.wait(self.interval)

    def __enter__(self) -> _RssSampler:
        self.peak = self.current()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak = max(self.peak, self.current())


def _max_rss_bytes(who: int = resource.RUSAGE_SELF) -> int:
    rss = resource.getrusage(who).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)  # macOS reports bytes, Linux KiB


def _mb(nbytes: float) -> float:
    return round(nbytes / 2**20, 1)


# --------------------------------------------------------------------------- inputs
def _default_text() -> Path:
    env = os.environ.get("HF_TEXTDP_BENCH_TEXT")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for root in (Path.cwd(), *here.parents):
        for cand in (root / _MR_RELATIVE, root.parent / _MR_RELATIVE):
            if cand.is_file():
                return cand
    return _SAMPLE


def load_texts(
    text: str | os.PathLike[str] | None = None, rows: int | None = 4000, *, one_word: bool = False
) -> tuple[list[str], str]:
    """Rows of text for the bench and a description of where they came from.

    Args:
        text (`str`, *optional*): a .jsonl file (field ``text``) or a plain text file (one row per
            line). Default: SentEval MR (``shared/data/senteval/mr.jsonl`` beside the checkout, or
            ``$HF_TEXTDP_BENCH_TEXT``), else the packaged 30-row sample.
        rows (`int`, *optional*, defaults to 4000): rows to use (cycling through the file when it is
            shorter); ``None`` for the whole file.
        one_word (`bool`, defaults to `False`): make every row a single whitespace word of the text.
    """
    path = Path(text) if text is not None else _default_text()
    if not path.is_file():
        raise InvalidParameterError(f"text: {str(path)!r} is not an existing file (a .jsonl or a plain text file).")
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
    if rows is not None:
        if rows < 1:
            raise InvalidParameterError(f"rows must be an int >= 1, got {rows}.")
        out = [out[i % len(out)] for i in range(rows)]
    return out, f"{path.name} ({len(out)} rows{', one word each' if one_word else ''})"


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


# --------------------------------------------------------------------------- records
@dataclass
class BenchCase:
    """One mechanism × post-processing, measured."""

    name: str
    mechanism: str
    postprocess: str
    epsilon: float
    tokens: int = 0
    seconds: float = 0.0
    tokens_per_s: float = 0.0
    bound_tokens_per_s: float = 0.0
    fraction_of_bound: float = 0.0
    fraction_paired: float = 0.0
    peak_rss_mb: float = 0.0
    search_filter: str | None = None
    rounds: list[dict[str, float]] = field(default_factory=list)
    per_token_reference: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class BenchReport:
    """Everything ``hf-textdp bench`` measured, with the machine it ran on."""

    model: str
    device: str
    text: str
    rows: int
    V: int
    d: int
    threads: int
    torch_version: str
    machine: str
    bound_flops: float
    bound_tokens_per_s: float
    cases: list[BenchCase]
    peak_rss_mb: float
    cold_start: dict[str, Any] | None = None
    memory_run: dict[str, Any] | None = None
    model_load_s: float | None = None
    vector_load: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- the run
def _per_token_reference(priv: Any, texts: Sequence[str], n_tokens: int) -> dict[str, Any]:
    """Per-word-tool search (one fp32 distance pass + argmin per token) on madlib's noisy vectors."""
    from .rng import derive_row_seed, streams_for_rows
    from .space import CANDIDATE

    space, mech = priv.space, priv.mechanism
    rows = priv._tokens.encode(list(texts[:200]))
    pos = []
    for r in rows:
        cls, p = space.classify(r.ids)
        pos.extend(p[cls == CANDIDATE].tolist())
    pos_t = torch.tensor(pos[:n_tokens], dtype=torch.int64)
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
    V: int,
    d: int,
) -> BenchCase:
    from .config import PrivatizerConfig
    from .postprocess import clear_neighbour_caches
    from .privatizer import Privatizer

    mech_name, post = _parse_case(case)
    out = BenchCase(
        name=case if "/" in case or post == "nearest" else f"{mech_name}/{post}",
        mechanism=mech_name,
        postprocess=post,
        epsilon=epsilon,
    )
    cfg = PrivatizerConfig(mechanism=mech_name, epsilon=epsilon, model=model, postprocess=post, device=device)
    priv = Privatizer(cfg, seed=seed, split="bench")
    priv.privatize(list(texts[:16]))  # warm-up: load, set up, scale statistics (cached), first kernels
    mech = priv.mechanism
    if mech.kind == "additive":  # selection mechanisms sample; they run no search
        out.search_filter = "bf16" if mech.search_index(priv.space)._use_bf16() else "fp32"  # type: ignore[attr-defined]
    elif getattr(mech, "sampler", None) == "dense":  # the exact sampler's bound is an int8 product
        out.search_filter = "int8"
    per_flop = 2.0 * V * d
    best_rate, best_bound = 0.0, 0.0
    with _RssSampler() as rss:
        for _ in range(max(1, repeats)):
            clear_neighbour_caches()  # every pass starts cold: a repeat of the same rows must not gain
            before = matmul_bound(bound_repeats, device=device)
            start_tokens = priv.totals.dp_tokens
            t0 = time.perf_counter()
            for s in range(0, len(texts), batch_size):
                priv.privatize(list(texts[s : s + batch_size]), row_ids=range(s, min(s + batch_size, len(texts))))
            dt = time.perf_counter() - t0  # privatize returns host lists: the device work is done
            tokens = priv.totals.dp_tokens - start_tokens
            after = matmul_bound(bound_repeats, device=device)
            rate = tokens / dt
            bound = max(before, after) / per_flop
            out.rounds.append({"tokens_per_s": rate, "bound_tokens_per_s": bound, "fraction": rate / bound})
            out.tokens, out.seconds = tokens, dt
            best_rate, best_bound = max(best_rate, rate), max(best_bound, bound)
    out.tokens_per_s = best_rate
    out.bound_tokens_per_s = best_bound
    out.fraction_of_bound = best_rate / best_bound  # conservative: the best product seen in the case
    fractions = sorted(r["fraction"] for r in out.rounds)
    out.fraction_paired = fractions[len(fractions) // 2]  # median round (upper median for an even count)
    out.peak_rss_mb = _mb(rss.peak)
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


def _run_cli(args: list[str], timeout: float) -> dict[str, Any]:
    """Run ``python -m hf_textdp.cli ARGS``: wall seconds, exit code and the child's peak RSS."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "hf_textdp.cli", *args],
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
    rss = _max_rss_bytes(resource.RUSAGE_CHILDREN)  # the largest finished child so far
    result: dict[str, Any] = {"seconds": wall, "returncode": proc.returncode, "peak_rss_mb": _mb(rss)}
    if proc.returncode != 0:
        result["error"] = (stderr.decode("utf-8", "replace").strip().splitlines() or ["?"])[-1][:300]
    else:
        result["output"] = stdout.decode("utf-8", "replace").strip()[:300]
    return result


def _vector_load(path: Path) -> dict[str, Any]:
    """Reading a vector file once (bytes), parsing it (cache off) and loading it from the parse cache."""
    from . import vectors

    t0 = time.perf_counter()
    raw = path.read_bytes()
    read_s = time.perf_counter() - t0
    del raw
    prev = os.environ.get("HF_TEXTDP_VECTOR_CACHE")
    try:
        os.environ["HF_TEXTDP_VECTOR_CACHE"] = "0"
        t0 = time.perf_counter()
        vec = vectors.read_vectors(path)
        parse_s = time.perf_counter() - t0
        os.environ["HF_TEXTDP_VECTOR_CACHE"] = "1"
        vectors.read_vectors(path)  # make sure the cache holds it
        t0 = time.perf_counter()
        vectors.read_vectors(path)
        cached_s = time.perf_counter() - t0
    finally:
        if prev is None:
            os.environ.pop("HF_TEXTDP_VECTOR_CACHE", None)
        else:
            os.environ["HF_TEXTDP_VECTOR_CACHE"] = prev
    return {
        "file_mb": _mb(path.stat().st_size),
        "rows": len(vec.words),
        "d": int(vec.matrix.shape[1]),
        "read_s": read_s,
        "parse_s": parse_s,
        "cached_s": cached_s,
    }


def _privatize_cli(src: Path, out: Path, model: str, device: str, epsilon: float, timeout: float) -> dict[str, Any]:
    """``hf-textdp privatize SRC OUT`` in a fresh interpreter (seed 1), as :func:`_run_cli` reports it."""
    argv = ["privatize", str(src), str(out), "--epsilon", str(epsilon), "--model", model, "--device", device]
    return _run_cli(argv + ["--seed", "1"], timeout=timeout)


def _cold_start(model: str, device: str, texts: Sequence[str], epsilon: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hf_textdp_bench_") as tmp:
        src = Path(tmp) / "in.jsonl"
        src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:30]), encoding="utf-8")
        res = _privatize_cli(src, Path(tmp) / "out.jsonl", model, device, epsilon, timeout=600)
    res["rows"] = min(30, len(texts))
    return res


def _memory_run(model: str, device: str, text_path: Path, epsilon: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hf_textdp_bench_") as tmp:
        src = text_path
        if src.suffix.lower() not in (".jsonl", ".ndjson"):
            texts, _ = load_texts(src, None)
            src = Path(tmp) / "in.jsonl"
            src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
        res = _privatize_cli(src, Path(tmp) / "out.jsonl", model, device, epsilon, timeout=3600)
    res["text"] = text_path.name
    return res


def run_bench(
    *,
    model: str = DEFAULT_MODEL,
    mechanisms: Sequence[str] | None = None,
    device: str = "cpu",
    text: str | os.PathLike[str] | None = None,
    rows: int = 4000,
    epsilon: float = 10.0,
    batch_size: int = 1000,
    repeats: int = 1,
    bound_repeats: int = 5,
    one_word: bool = False,
    reference_tokens: int = 200,
    cold_start: bool = True,
    memory_run: bool = False,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> BenchReport:
    """Measure every case of ``mechanisms`` (default :data:`DEFAULT_CASES`); see the module docstring.

    Args:
        model (`str`): as ``PrivatizerConfig.model`` (a vector file path benches static vectors).
        mechanisms (`list[str]`, *optional*): cases ``"mechanism"`` or ``"mechanism/postprocess"``.
        device (`str`, defaults to `"cpu"`): ``"cpu"`` or ``"cuda[:N]"``.
        text (`str`, *optional*): the text file (see :func:`load_texts`).
        rows (`int`, defaults to 4000): rows privatized per timed pass.
        epsilon (`float`, defaults to 10.0): ε of every case (throughput barely depends on it).
        batch_size (`int`, defaults to 1000): rows per ``privatize`` call (``Dataset.map``'s default).
        repeats (`int`, defaults to 1): timed passes per case (the best counts).
        bound_repeats (`int`, defaults to 5): fp32 products per bound measurement (two per pass).
        one_word (`bool`, defaults to `False`): one whitespace word per row (per-row overhead).
        reference_tokens (`int`, defaults to 200): tokens for the per-token reference (0: skip).
        cold_start (`bool`, defaults to `True`): time a cold CLI run on 30 rows (a subprocess).
        memory_run (`bool`, defaults to `False`): privatize the whole text file with the CLI in a
            subprocess and report its peak RSS.
        seed (`int`, defaults to 0): the privatizers' seed (bench outputs are thrown away).
        progress (`callable`, *optional*): called with a line after each step.
    """
    from .space import load_space

    if rows < 1 or batch_size < 1 or repeats < 1 or bound_repeats < 1:
        raise InvalidParameterError(
            f"rows, batch_size, repeats and bound_repeats must be >= 1, got {rows}, {batch_size}, {repeats}, "
            f"{bound_repeats}."
        )
    cases = list(mechanisms) if mechanisms else list(DEFAULT_CASES)
    for c in cases:
        _parse_case(c)
    note = progress or (lambda line: None)
    texts, source = load_texts(text, rows, one_word=one_word)
    t0 = time.perf_counter()
    space = load_space(model, device)
    load_s = time.perf_counter() - t0
    V, d = space.V, space.d
    bound0 = matmul_bound(bound_repeats, device=device)
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
                V=V,
                d=d,
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
        note(_case_line(res))
    bound = max([bound0] + [r.bound_tokens_per_s * 2.0 * V * d for r in results if r.error is None])
    report = BenchReport(
        model=model,
        device=device,
        text=source,
        rows=len(texts),
        V=V,
        d=d,
        threads=torch.get_num_threads(),
        torch_version=torch.__version__,
        machine=f"{platform.machine()} {platform.processor() or platform.system()}, {os.cpu_count()} CPUs",
        bound_flops=bound,
        bound_tokens_per_s=bound / (2.0 * V * d),
        cases=results,
        peak_rss_mb=_mb(_max_rss_bytes()),
        model_load_s=load_s,
    )
    if Path(model).is_file():
        report.vector_load = _vector_load(Path(model))
        note(f"vector file: read {report.vector_load['read_s']:.2f} s, parse {report.vector_load['parse_s']:.2f} s")
    if cold_start:
        report.cold_start = _cold_start(model, device, texts, epsilon)
        note(f"cold start: {report.cold_start['seconds']:.2f} s")
    if memory_run:
        path = Path(text) if text is not None else _default_text()
        report.memory_run = _memory_run(model, device, path, epsilon)
        note(f"memory run: peak RSS {report.memory_run['peak_rss_mb']} MB")
    return report


# --------------------------------------------------------------------------- output
def _case_line(c: BenchCase) -> str:
    if c.error:
        return f"{c.name}: error: {c.error}"
    return f"{c.name}: {c.tokens_per_s:,.0f} tokens/s, {c.fraction_of_bound:.2f} of the fp32 bound"


def format_table(report: BenchReport) -> str:
    """The report as a fixed-width table with its header lines."""
    lines = [
        f"model {report.model} (V = {report.V:,}, d = {report.d}) on {report.device}; text {report.text}",
        f"machine {report.machine}; torch {report.torch_version}, {report.threads} threads",
        f"fp32 bound: {report.bound_flops / 1e9:,.0f} GFLOPS = {report.bound_tokens_per_s:,.0f} tokens/s "
        "(best 2048^3 product, same run)",
        "",
        f"{'case':28s} {'filter':>6s} {'tokens':>9s} {'tokens/s':>10s} {'bound tok/s':>11s} {'fraction':>9s} "
        f"{'paired':>7s} {'peak RSS':>9s}",
    ]
    for c in report.cases:
        if c.error:
            lines.append(f"{c.name:28s} error: {c.error}")
            continue
        lines.append(
            f"{c.name:28s} {c.search_filter or '-':>6s} {c.tokens:>9,d} {c.tokens_per_s:>10,.0f} "
            f"{c.bound_tokens_per_s:>11,.0f} {c.fraction_of_bound:>9.2f} {c.fraction_paired:>7.2f} "
            f"{c.peak_rss_mb:>7,.0f}MB"
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
    if report.cold_start:
        cs = report.cold_start
        status = "" if cs["returncode"] == 0 else f" (exit {cs['returncode']}: {cs.get('error')})"
        lines.append(f"time to first output (cold CLI, {cs['rows']} rows): {cs['seconds']:.2f} s{status}")
    if report.memory_run:
        mr = report.memory_run
        status = "" if mr["returncode"] == 0 else f" (exit {mr['returncode']}: {mr.get('error')})"
        lines.append(
            f"CLI on all of {mr['text']}: {mr['seconds']:.1f} s, peak RSS {mr['peak_rss_mb']:,.0f} MB{status}"
        )
    return "\n".join(lines)
