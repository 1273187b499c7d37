"""``hf-textdp bench``: end-to-end throughput against this machine's fp32, bf16 and int8 product bounds.

Every figure comes from one process and one run, so that it can be compared across machines as a
ratio rather than as an absolute speed:

* **bounds** — for each arithmetic (:data:`ARITHMETICS`) the machine runs natively (bf16 and int8 from the
  CPU's flags; an emulated product is skipped, with why, and never divides anything), the best of at least
  three products shaped like the work, noisy vectors against every candidate, the rows sized by a short
  calibration so that one fp32 product takes about 0.25 s on a CPU: fp32 and bf16 ``torch.mm`` (fp32 with TF32
  and reduced-precision reductions off) and int8 ``torch._int_mm`` (int8 × int8 → int32); where the search
  runs the fused bf16 kernel, the bf16 bound is the faster of ``torch.mm`` and that kernel. Each is converted to
  tokens/s as ops/(2·V·d): the rate at which that product could merely score every candidate of
  every token.
* **rate** — privatized (non-special) tokens per second through :meth:`Privatizer.privatize`, end to
  end: tokenization, classification, noise, search or sampling, decoding and accounting.
* **fractions** — rate / bound, against the fp32 bound, the bf16 bound and the bound of the
  fastest native arithmetic that does the case's work (``own``, see :func:`case_arithmetic`); each case
  names the kernel it ran (:func:`case_kernel`). Without ``rows``, a timed pass is sized to a few seconds. Bound and
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

from .bounds import ARITHMETICS, CPU_FLAGS, cpu_info, gemm_bounds
from .cases import DEFAULT_CASES, BenchCase, BenchReport, case_arithmetic, case_kernel, device_inputs, work_per_token
from .run import run_bench
from .table import format_table
from .texts import SAMPLE_TEXT, load_texts


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
    "case_kernel",
    "cpu_info",
    "device_inputs",
    "gemm_bounds",
    "load_texts",
    "work_per_token",
]
