"""The bench's cases (mechanism/post-processing), their records, and one case's interleaved rate and bound
measurement."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from ...config import PrivatizerConfig
from ...errors import InvalidParameterError
from ...gpu import triton_ready
from ...gpu.nearest import tensor_core_model_holds
from ...mechanisms import AdditiveMechanism, get_mechanism_class
from ...postprocess import clear_neighbour_caches
from ...privatizer import Privatizer
from ...rng import Streams, derive_row_seed, streams_for_rows
from ...search import bf16_filter_available, int8_filter_runs
from ...space import CANDIDATE, EmbeddingSpace
from .bounds import ARITHMETICS, Arithmetic, _max_of, _sync, gemm_bounds, skipped_arithmetic
from .processes import _mb, _RssSampler


__all__ = [
    "BenchCase",
    "BenchReport",
    "DEFAULT_CASES",
    "K1_STEPS",
    "SAMPLER_ARITHMETIC",
    "SEARCH_STEPS",
    "case_arithmetic",
    "case_kernel",
    "device_inputs",
    "work_per_token",
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

#: the arithmetic of each selection mechanism's sampler where int8 is native (it scores with an exact int8 product;
#: elsewhere it runs fp32 or the AVX2 int16 key kernel, held to the fp32 bound)
SAMPLER_ARITHMETIC: dict[str, Arithmetic] = {"tem": "int8", "santext": "int8", "santext_plus": "int8"}

#: post-processing steps that run the exact search (its filter: bf16 where exact and fast, else fp32)
SEARCH_STEPS = ("nearest", "top2", "rank", "backproject", "nearest_excluding_input")

#: the steps that search one neighbour per token (on a GPU: the fused tensor-core search)
K1_STEPS = ("nearest", "backproject")

#: seconds the per-token reference runs at most (after its first 10 tokens): one token is a whole V×d pass
REFERENCE_S = 5.0


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

    Additive mechanisms with a search step run the exact search, whose filter is int8 where
    :func:`~hf_textdp.search.int8_filter_runs` says so (held to the int8 bound where int8 is native, to fp32 on
    AVX2), else bf16 where :func:`~hf_textdp.search.bf16_filter_available` says so, else fp32; selection mechanisms
    run their sampler's arithmetic (:data:`SAMPLER_ARITHMETIC`) where it is native on the device
    (:func:`~hf_textdp.tools.bench.bounds.skipped_arithmetic`), else fp32; a step with no product (``vector``)
    is held to fp32. Never an emulated arithmetic: the bench does not time those.
    """
    mech, post = _parse_case(case)
    if get_mechanism_class(mech).kind == "selection":
        arith = SAMPLER_ARITHMETIC.get(mech, "fp32")
        return "fp32" if arith in skipped_arithmetic(space.device) else arith
    if post in SEARCH_STEPS:
        if post in K1_STEPS and triton_ready(space.device) and tensor_core_model_holds(space.device):
            return "bf16"  # the fused GPU search: bf16 tensor cores (where they pass the bound's model check)
        if int8_filter_runs(space.device):  # held to int8 where it is native (VNNI), to fp32 on AVX2
            return "fp32" if "int8" in skipped_arithmetic(space.device) else "int8"
        return "bf16" if bf16_filter_available(space.device) else "fp32"
    return "fp32"


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
    kernel_name: str = ""  # what scored the case's tokens (case_kernel)
    ops_per_token: float = 0.0  # 2·n·m averaged over the tokens (work_per_token)
    #: a sampler's proposals over its tokens in the timed passes (< 1 where a call's tokens with the same input share
    #: one: the tokens then do less than the 2·n·m each that the fractions divide by); None: no sampler
    proposals_per_token: float | None = None
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
    bound takes the faster of two (``torch.mm`` and the search's fused kernel). ``flags_used`` are the CPU flags
    the kernels' choice read, ``skipped`` the arithmetics not timed (not native here) with why.
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
    flags_used: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    bound_rows_s: float | None = None  # seconds one fp32 bound product was sized to take (None: not calibrated)
    rows_sized_s: float | None = None  # seconds a timed pass was sized to take (None: rows given)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def case_kernel(priv: Privatizer, post: str) -> str:
    """The kernel that scored the case's tokens: ``VNNI int8 filter``, ``AVX2 int8 filter``, ``AVX-512 bf16 fused
    filter``, ``AVX2 fp32 fused filter``,
    ``torch bf16`` or ``torch fp32`` for the exact search (``tensor-core fused search`` on a GPU); ``VNNI keys``,
    ``AVX2 keys`` or ``fp32 product`` for the samplers; ``no product`` for a step without one."""
    part, mech = priv.engine.class_mechanisms[0]
    if isinstance(mech, AdditiveMechanism):
        if post not in SEARCH_STEPS:
            return "no product"
        index = mech.search_index(part.space)
        if post in K1_STEPS and index._use_tensor_cores():
            return "tensor-core fused search"
        int8 = index._int8_rows(1)
        if int8 is not None:
            return {"vnni": "VNNI int8 filter", "avx2": "AVX2 int8 filter"}[int8.kind]
        if index._use_bf16():
            return "AVX-512 bf16 fused filter" if index._packed_rows(1) is not None else "torch bf16"
        return "AVX2 fp32 fused filter" if index._avx2_rows(1) is not None else "torch fp32"
    sampler_for = getattr(mech, "sampler_for", None)
    if sampler_for is None:
        return "fp32 product"
    targets = sampler_for(part.space)._kernel_targets()
    if targets is None:
        return "int8 product" if part.space.device.type != "cpu" else "fp32 product"
    return {"vnni": "VNNI keys", "avx2": "AVX2 keys"}.get(targets.kind, "fp32 product")


def work_per_token(priv: Privatizer, texts: Sequence[str]) -> tuple[float, str]:
    """Operations (2 per multiply-add) a privatized token of ``texts`` costs the product it runs, and the shapes.

    A token is scored against every row of its piece class's search index (additive mechanisms: the
    index ``nearest`` searches, projected for privemb, transformed with a bound) or of its class's space
    (samplers), in that index's dimension: 2·n_c·m_c, averaged over the tokens by class. The shapes
    read ``n×m (share of tokens)``.
    """
    space = priv.engine.space
    pairs = priv.engine.class_mechanisms
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
        cls, p = priv.engine.space.classify(r.ids)
        parts.append(p[cls == CANDIDATE])
    return parts


def _candidate_positions(priv: Privatizer, texts: Sequence[str]) -> np.ndarray:
    """The candidate positions of the privatized tokens of ``texts``, in order (int64)."""
    parts = _candidate_rows(priv, texts)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _per_token_reference(priv: Any, texts: Sequence[str], n_tokens: int) -> dict[str, Any]:
    """Per-word-tool search (one fp32 distance pass + argmin per token) on madlib's noisy vectors: ``n_tokens`` of
    them, or as many as :data:`REFERENCE_S` seconds take."""
    space, mech = priv.engine.space, priv.engine.mechanism
    pos_t = torch.from_numpy(_candidate_positions(priv, texts[:200])[:n_tokens])
    st = streams_for_rows([derive_row_seed(0, 0, "bench-reference", 0)], [int(pos_t.numel())], space.device)
    Z = mech.perturb(mech.inputs(space, pos_t), st)
    index = mech.search_index(space)
    E = index.E
    ref = torch.empty(Z.shape[0], dtype=torch.int64)
    t0 = time.perf_counter()
    done = 0
    while done < Z.shape[0] and (done < 10 or time.perf_counter() - t0 < REFERENCE_S):
        ref[done] = int(((E - Z[done]) ** 2).sum(1).argmin())
        done += 1
    dt = time.perf_counter() - t0
    Z, ref = Z[:done], ref[:done]
    exact = index.search(Z, 1)[:, 0]
    return {
        "tokens": int(Z.shape[0]),
        "tokens_per_s": Z.shape[0] / dt,
        "agreement": float((exact == ref).double().mean()),
    }


def device_inputs(priv: Privatizer, texts: Sequence[str]) -> tuple[torch.Tensor, Streams]:
    """What :meth:`ReleaseEngine.release_streams` takes for ``texts`` as rows 0 … n − 1: every privatized token's
    candidate position (on CPU) and the rows' keyed streams (on the privatizer's device)."""
    parts = _candidate_rows(priv, texts)
    positions = torch.from_numpy(np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))
    streams = streams_for_rows(
        priv.engine.row_keys(range(len(texts))), [int(p.size) for p in parts], priv.engine.space.device
    )
    return positions, streams


def _search_indexes(priv: Privatizer) -> list[Any]:
    """The exact-search indexes a privatizer's classes search (none for selection mechanisms)."""
    return [
        mech.search_index(part.space)
        for part, mech in priv.engine.class_mechanisms
        if isinstance(mech, AdditiveMechanism)
    ]


def _kernel_pass(priv: Privatizer, texts: Sequence[str], repeats: int) -> dict[str, Any]:
    """Tokens/s of the device part alone: noise and search (or sampling) of all ``texts``' tokens in one call.

    Tokenization, key derivation and decoding happen before the clock starts; the clock stops when the
    released positions are back on the host. ``fallback_queries`` counts the tokens the fused GPU search
    handed to the generic search in the timed passes (near-ties, overflowing candidate lists).
    """
    positions, streams = device_inputs(priv, texts)
    dev = priv.engine.space.device
    priv.engine.release_streams(positions, streams)  # warm-up: kernels compiled, operands prepared
    indexes = _search_indexes(priv)
    before = sum(getattr(ix, "fallback_queries", 0) for ix in indexes)
    best = math.inf
    for _ in range(max(1, repeats)):
        _sync(dev)
        t0 = time.perf_counter()
        priv.engine.release_streams(positions, streams)
        _sync(dev)
        best = min(best, time.perf_counter() - t0)
    fallbacks = sum(getattr(ix, "fallback_queries", 0) for ix in indexes) - before
    n = int(positions.numel())
    return {"tokens": n, "seconds": best, "tokens_per_s": n / best, "fallback_queries": fallbacks, "passes": repeats}


def _proposals(priv: Privatizer) -> int | None:
    """The proposals the case's samplers have computed so far (every class's), or ``None`` without a sampler."""
    counts = [
        sampler.proposals
        for _, mech in priv.engine.class_mechanisms
        if (cached := getattr(mech, "_sampler", None)) is not None and hasattr(sampler := cached[1], "proposals")
    ]
    return sum(counts) if counts else None


def _search_filter(priv: Privatizer, post: str, arithmetic: str) -> str | None:
    """The filter column of a case: the exact search's filter (``bf16tc`` the fused filter on tensor cores), the
    sampler's arithmetic, or ``None`` (a step with neither)."""
    mech = priv.engine.mechanism
    if mech.kind == "additive":  # selection mechanisms sample; they run no search
        index = mech.search_index(priv.engine.space)  # type: ignore[attr-defined]
        if post in K1_STEPS and index._use_tensor_cores():
            return "bf16tc"  # gpu/nearest.py
        return "int8" if index._int8_rows(1) is not None else "bf16" if index._use_bf16() else "fp32"
    if getattr(mech, "sampler", None) == "dense":  # the exact sampler: an int8 product where native
        return arithmetic
    return None


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
    bound_rows: int | None = None,
) -> BenchCase:
    mech_name, post = _parse_case(case)
    out = BenchCase(name=case, mechanism=mech_name, postprocess=post, epsilon=epsilon)
    cfg = PrivatizerConfig(mechanism=mech_name, epsilon=epsilon, model=model, postprocess=post, device=device)
    # public benchmark text with a public seed: not a privacy key, so a small seed is fine here
    priv = Privatizer(cfg, seed=seed, split="bench", allow_weak_seed=True)
    priv.privatize(list(texts[:16]))  # warm-up: load, set up, scale statistics (cached), first kernels
    out.arithmetic = case_arithmetic(case, priv.engine.space)
    out.search_filter = _search_filter(priv, post, out.arithmetic)
    out.kernel_name = case_kernel(priv, post)
    V, d = priv.engine.space.V, priv.engine.space.d
    per_op, out.searched = work_per_token(priv, texts)
    out.ops_per_token = per_op
    best_rate = 0.0
    best_bound: dict[str, float | None] = dict.fromkeys(ARITHMETICS)
    proposals0, tokens0 = _proposals(priv), priv.totals.dp_tokens
    with _RssSampler() as rss:
        for _ in range(max(1, repeats)):
            # every pass starts cold: a repeat of the same rows must not gain from neighbours searched for
            # them (a whole neighbour table, public set-up like the scale statistics, is read back instead)
            clear_neighbour_caches()
            with rss.paused():  # the products' operands are the bench's memory, not the case's
                before = gemm_bounds(V, d, repeats=bound_repeats, device=device, rows=bound_rows)
            start_tokens = priv.totals.dp_tokens
            t0 = time.perf_counter()
            for s in range(0, len(texts), batch_size):
                priv.privatize(list(texts[s : s + batch_size]), row_ids=range(s, min(s + batch_size, len(texts))))
            dt = time.perf_counter() - t0  # privatize returns host lists: the device work is done
            tokens = priv.totals.dp_tokens - start_tokens
            with rss.paused():
                after = gemm_bounds(V, d, repeats=bound_repeats, device=device, rows=bound_rows)
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
    if (proposals := _proposals(priv)) is not None and proposals0 is not None:
        out.proposals_per_token = (proposals - proposals0) / max(1, priv.totals.dp_tokens - tokens0)
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
