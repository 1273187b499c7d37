"""``run_bench``: every case's rate against the interleaved bounds, the per-token reference, the CLI runs and
the report."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from ...errors import InvalidParameterError
from ...io.models import load_space
from ...space import DEFAULT_MODEL
from .bounds import (
    BOUND_PRODUCT_S,
    _ceil8,
    _max_of,
    calibrate_rows,
    cpu_info,
    flags_used,
    gemm_bounds,
    skipped_arithmetic,
)
from .cases import DEFAULT_CASES, BenchCase, BenchReport, _parse_case, _run_case
from .processes import _max_rss_bytes, _mb, _privatize_cli, _vector_load
from .table import _case_line
from .texts import _is_sample, _load, _read_rows


__all__ = ["PASS_S", "run_bench", "sized_rows"]

#: seconds a timed pass is sized to take when ``rows`` is not given (:func:`sized_rows`); rows between
#: :data:`MIN_ROWS` and :data:`MAX_ROWS`
PASS_S = 6.0
MIN_ROWS, MAX_ROWS = 200, 4000


def sized_rows(texts: Sequence[str], fp32_ops_per_s: float, V: int, d: int, seconds: float = PASS_S) -> int:
    """Rows of ``texts`` a timed pass takes about ``seconds`` on, at half the fp32 bound's tokens/s over all V
    candidates (a case's rate is at most that bound, and most cases score fewer rows than V), a token taken as
    four characters; within [:data:`MIN_ROWS`, :data:`MAX_ROWS`]."""
    chars = sum(len(t) for t in texts) / max(1, len(texts))
    tokens_per_row = max(1.0, chars / 4)
    rate = 0.5 * fp32_ops_per_s / (2.0 * V * d)
    return max(MIN_ROWS, min(MAX_ROWS, int(seconds * rate / tokens_per_row)))


def run_bench(
    *,
    model: str = DEFAULT_MODEL,
    mechanisms: Sequence[str] | None = None,
    device: str = "cpu",
    text: str | os.PathLike[str] | None = None,
    rows: int | None = None,
    epsilon: float = 10.0,
    batch_size: int = 1000,
    repeats: int = 3,
    bound_repeats: int = 3,
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
        rows (`int`, *optional*): rows privatized per timed pass; default: sized from the first fp32 bound so
            that a pass takes about :data:`PASS_S` seconds (:func:`sized_rows`), the whole default run minutes
            on 2 cores.
        epsilon (`float`, defaults to 10.0): ε of every case (throughput barely depends on it).
        batch_size (`int`, defaults to 1000): rows per ``privatize`` call (``Dataset.map``'s default).
        repeats (`int`, defaults to 3): timed passes per case (the best counts; ``paired`` is the median).
        bound_repeats (`int`, defaults to 3): products of each arithmetic per bound measurement (two
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
    if (rows is not None and rows < 1) or batch_size < 1 or repeats < 1 or bound_repeats < 1:
        raise InvalidParameterError(
            f"rows, batch_size, repeats and bound_repeats must be >= 1, got {rows}, {batch_size}, {repeats}, "
            f"{bound_repeats}."
        )
    cases = list(mechanisms) if mechanisms else list(DEFAULT_CASES)
    for c in cases:
        _parse_case(c)
    note = progress or (lambda line: None)
    setup = _setup(model, device, text, rows, one_word, bound_repeats, note)
    kernel = torch.device(device).type == "cuda" if kernel_only is None else kernel_only
    run_case = dict(model=model, device=device, epsilon=epsilon, batch_size=batch_size, repeats=repeats)
    run_case.update(bound_repeats=bound_repeats, seed=seed, reference_tokens=reference_tokens, kernel_only=kernel)
    results = [_measure_case(c, setup, run_case, note) for c in cases]
    report = _report(setup, results, model, device, one_word, repeats, rows_given=rows is not None)
    _cli_runs(report, setup, model, device, epsilon, cold_start, memory_run, note)
    return report


class _Setup(NamedTuple):
    """What every case shares: the text, the space's size and load time, and the machine's measured bounds."""

    text_path: Path
    file_rows: int
    texts: list[str]
    source: str
    rows: int
    V: int
    d: int
    load_s: float
    skipped: dict[str, str]
    rows_b: int
    sources: dict[str, float]
    best_ops: dict[str, float | None]


def _setup(
    model: str,
    device: str,
    text: str | os.PathLike[str] | None,
    rows: int | None,
    one_word: bool,
    bound_repeats: int,
    note: Callable[[str], None],
) -> _Setup:
    """Load the text and the space, measure the products' bounds, and size the rows from the fp32 bound when
    ``rows`` is not given."""
    text_path, file_rows, texts, source = _load(text, rows, one_word)
    t0 = time.perf_counter()
    space = load_space(model, device)
    load_s = time.perf_counter() - t0
    V, d = space.V, space.d
    skipped = skipped_arithmetic(device)
    for a, why in skipped.items():
        note(f"{a} bound skipped: {why}")
    rows_b = calibrate_rows(V, d, device)
    sources: dict[str, float] = {}
    best_ops = gemm_bounds(V, d, repeats=bound_repeats, device=device, sources=sources, rows=rows_b)
    if rows is None:
        rows = sized_rows(texts, best_ops["fp32"] or 0.0, V, d)
        text_path, file_rows, texts, source = _load(text, rows, one_word)
        note(f"rows: {rows:,} per timed pass (sized to about {PASS_S:g} s from the fp32 bound)")
    if _is_sample(text_path):
        note(f"text: {source}")
    return _Setup(text_path, file_rows, texts, source, rows, V, d, load_s, skipped, rows_b, sources, best_ops)


def _measure_case(c: str, setup: _Setup, run_case: dict[str, Any], note: Callable[[str], None]) -> BenchCase:
    """One case measured (or its error recorded: one failing case must not hide the others); its products raise
    the run's best bounds."""
    try:
        res = _run_case(c, texts=setup.texts, bound_rows=setup.rows_b, **run_case)
    except Exception as err:  # noqa: BLE001 - one failing case must not hide the others
        res = BenchCase(
            name=c,
            mechanism=c.partition("/")[0],
            postprocess=c.partition("/")[2] or "nearest",
            epsilon=run_case["epsilon"],
            error=f"{type(err).__name__}: {' '.join(str(err).split())[:300]}",
        )
    best_ops = setup.best_ops
    for a, tps in res.bound_tokens_per_s.items():
        best_ops[a] = _max_of(best_ops[a], None if tps is None else tps * res.ops_per_token)
    note(_case_line(res))
    return res


def _report(
    setup: _Setup,
    results: list[BenchCase],
    model: str,
    device: str,
    one_word: bool,
    repeats: int,
    rows_given: bool,
) -> BenchReport:
    """The report: the machine, the bounds in tokens/s, the cases."""
    per_op = 2.0 * setup.V * setup.d
    skipped = setup.skipped
    bounds: dict[str, dict[str, Any]] = {
        a: {
            "ops_per_s": ops,
            "tokens_per_s": None if ops is None else ops / per_op,
            "note": skipped.get(a) or (None if ops is not None else "the product failed on this device"),
        }
        for a, ops in setup.best_ops.items()
    }
    cpu_model, cpu_flags = cpu_info()
    machine = f"{platform.machine()} {platform.system()}, {os.cpu_count()} CPUs"
    if torch.device(device).type == "cuda":
        machine += f"; {torch.cuda.get_device_name(torch.device(device))}"
    return BenchReport(
        model=model,
        device=device,
        text=setup.source,
        text_path=str(setup.text_path),
        text_file_rows=setup.file_rows,
        text_is_sample=_is_sample(setup.text_path),
        one_word=one_word,
        rows=len(setup.texts),
        V=setup.V,
        d=setup.d,
        threads=torch.get_num_threads(),
        torch_version=torch.__version__,
        machine=machine,
        cpu_model=cpu_model,
        cpu_flags=cpu_flags,
        bound_shape=[setup.rows_b, _ceil8(setup.d), _ceil8(setup.V)],
        bounds=bounds,
        cases=results,
        peak_rss_mb=_mb(_max_rss_bytes()),
        repeats=repeats,
        model_load_s=setup.load_s,
        rows_sized_s=None if rows_given else PASS_S,
        bound_sources=setup.sources,
        flags_used=flags_used() if torch.device(device).type == "cpu" else [],
        skipped=skipped,
        bound_rows_s=BOUND_PRODUCT_S if torch.device(device).type == "cpu" else None,
    )


def _cli_runs(
    report: BenchReport,
    setup: _Setup,
    model: str,
    device: str,
    epsilon: float,
    cold_start: bool,
    memory_run: bool,
    note: Callable[[str], None],
) -> None:
    """The vector file's load times, and the CLI runs in fresh interpreters (cold start, whole file)."""
    texts, text_path = setup.texts, setup.text_path
    if Path(model).is_file():
        report.vector_load = _vector_load(Path(model))
        note(f"vector file: read {report.vector_load['read_s']:.2f} s, parse {report.vector_load['parse_s']:.2f} s")
    if cold_start:
        report.cold_start = _privatize_cli(texts[:30], model, device, epsilon, timeout=600) | {
            "rows": min(30, setup.rows)
        }
        note(f"cold start: {report.cold_start['seconds']:.2f} s")
    if memory_run:
        whole = (
            text_path if text_path.suffix.lower() in (".jsonl", ".ndjson") else _read_rows(text_path, one_word=False)
        )
        report.memory_run = _privatize_cli(whole, model, device, epsilon, timeout=3600) | {"text": text_path.name}
        note(f"memory run: peak RSS {report.memory_run['peak_rss_mb']} MB")
