"""The bench's report as a table (``hf-textdp bench`` prints it)."""

from __future__ import annotations

from typing import Any

from .bounds import CPU_FLAGS
from .cases import BenchCase, BenchReport
from .texts import _text_detail


__all__ = ["format_table"]


def _frac(x: float | None, width: int) -> str:
    return f"{'-':>{width}s}" if x is None else f"{x:>{width}.2f}"


def _case_line(c: BenchCase) -> str:
    if c.error:
        return f"{c.name}: error: {c.error}"
    parts = [f"{f:.2f} of {a}" for a, f in (("fp32", c.fraction_fp32), ("bf16", c.fraction_bf16)) if f is not None]
    own = f"{c.fraction_own:.2f}" if c.fraction_own is not None else "-"
    return (
        f"{c.name}: {c.tokens_per_s:,.0f} tokens/s, {', '.join(parts) or 'no bound'}, {own} of its own "
        f"({c.arithmetic}; {c.kernel_name or '?'})"
    )


def format_table(report: BenchReport) -> str:
    """The report as a fixed-width table with its header lines."""
    return "\n".join(_header_lines(report) + _case_lines(report) + _footer_lines(report))


def _header_lines(report: BenchReport) -> list[str]:
    """The model, text, machine and the products' bounds the cases are measured against."""
    m, k, n = report.bound_shape
    absent = [f for f in CPU_FLAGS if f not in report.cpu_flags]
    flags = " ".join(report.cpu_flags) or "none"
    text = _text_detail(report.text_file_rows, report.rows, one_word=report.one_word, sample=report.text_is_sample)
    used = " ".join(report.flags_used) or "none"
    sized = f" ({m} rows: one fp32 product sized to {report.bound_rows_s:g} s)" if report.bound_rows_s else ""
    lines = [
        f"model {report.model} (V = {report.V:,}, d = {report.d}) on {report.device}",
        f"text {report.text_path} ({text}"
        + (f"; rows sized to a {report.rows_sized_s:g} s pass" if report.rows_sized_s else "")
        + f"); {report.repeats} timed passes per case",
        f"cpu {report.cpu_model} ({report.machine}); flags {flags}" + (f", not {' '.join(absent)}" if absent else ""),
        f"torch {report.torch_version}, {report.threads} threads; flags used by the kernels: {used}",
        f"bounds: best {m}x{k} @ {k}x{n} products of the run{sized}; here tokens/s = ops/s / (2 V d); each case "
        "divides by its own 2 n m (the rows n and dimension m its tokens score, by piece class: the searched column)",
    ]
    for a, b in report.bounds.items():
        if b["ops_per_s"] is None:
            what = "skipped" if a in report.skipped and "native" in report.skipped[a] else "not measured"
            lines.append(f"  {a:5s} {what}: {b['note']}")
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
    return lines


def _shared_line(c: BenchCase) -> str:
    """A sampler whose tokens with the same input share a proposal: the fraction of tokens that computed one, and
    ``own`` per proposal (the rate over the bound with the work the proposals really did)."""
    p = c.proposals_per_token or 0.0
    per = "-" if c.fraction_own is None or p == 0.0 else f"{c.fraction_own * p:.2f}"
    return (
        f"  {c.name}: one proposal per distinct input of a call, {p:.2f} a token (its tokens with that input share "
        f"it; the fractions above count a full product per token); own per proposal {per}"
    )


def _case_lines(report: BenchReport) -> list[str]:
    """One line per case (end to end), then the kernel-only timings."""
    lines = [
        "",
        f"{'case':26s} {'arith':>5s} {'filter':>6s} {'tokens':>9s} {'tokens/s':>10s} {'fp32':>6s} {'bf16':>6s} "
        f"{'own':>6s} {'paired':>6s} {'peak RSS':>9s}  kernel",
    ]
    for c in report.cases:
        if c.error:
            lines.append(f"{c.name:26s} error: {c.error}")
            continue
        lines.append(
            f"{c.name:26s} {c.arithmetic:>5s} {c.search_filter or '-':>6s} {c.tokens:>9,d} {c.tokens_per_s:>10,.0f} "
            f"{_frac(c.fraction_fp32, 6)} {_frac(c.fraction_bf16, 6)} {_frac(c.fraction_own, 6)} "
            f"{_frac(c.fraction_paired, 6)} {c.peak_rss_mb:>6,.0f} MB  {c.kernel_name}"
        )
    lines.append(
        "(fp32, bf16, own: best pass over the best product of that arithmetic in the case; own = the arith column, "
        "the fastest native arithmetic that does the case's work; paired: median pass over its own paired bound; "
        "'-': a bound not timed)"
    )
    lines += [f"  searched by {c.name}: {c.searched}" for c in report.cases if c.searched and not c.error]
    lines += [_shared_line(c) for c in report.cases if not c.error and (c.proposals_per_token or 1.0) < 1.0]
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
    return lines


def _footer_lines(report: BenchReport) -> list[str]:
    """The per-token references, peak memory, the vector file's load and the CLI runs."""
    lines = [""]
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
    return lines
