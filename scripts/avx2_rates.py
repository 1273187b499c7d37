"""Issues 41 and 58's measurement: madlib/nearest, tem and santext tokens/s through ``Privatizer.privatize`` against
the fp32 GEMM bound measured in the same process, and the exact search's mismatches against float64 brute force with
each filter (``--filters``; MR tokens' noisy vectors at ε = 1, 10, 100, and ties and near ties), with the int8
filter's candidate list sizes.

Run with the AVX2 path forced on an AVX-512 machine (or on an AVX2-only CPU as is)::

    HF_HUB_OFFLINE=1 HF_TEXTDP_CPU_ISA=avx2 python scripts/avx2_rates.py --rows 4000 --passes 4
    HF_HUB_OFFLINE=1 python scripts/avx2_rates.py --passes 0 --filters int8,bf16,fp32   # the mismatch check alone

The cases' passes run in turn (round-robin); each is paired with fp32 products (``torch.mm`` 2048×d @ d×V,
V and d the space's, best of 3) just before and after it; ``best`` is the best pass over the best bound seen
in the case, ``paired`` the median of each pass over its own bound; ``x_first_case`` compares each case's
tokens/s with the first case's (best passes, and the median over rounds). A tile-shaped product
(2048×d @ d×4096, repeated to cover V: no 250 MB output to write) is reported too, as the stricter bound.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path

import torch

from hf_textdp import Privatizer, PrivatizerConfig
from hf_textdp.cpu.features import effective_flags, isa_override, native_arithmetic
from hf_textdp.cpu.int8_filter import int8_candidates
from hf_textdp.rng import derive_row_seed, streams_for_rows
from hf_textdp.search import ExactIndex, exact_fp32_matmul
from hf_textdp.tools.bench.cases import _candidate_positions, work_per_token


MR = Path("/work/shared/data/senteval/mr.jsonl")


def fp32_bounds(V: int, d: int, repeats: int = 3) -> tuple[float, float]:
    """(FLOPS of 2048×d @ d×V into a preallocated output, FLOPS of 2048×d @ d×4096 tiles covering V)."""
    g = torch.Generator().manual_seed(0)
    a = torch.rand(2048, d, generator=g) - 0.5
    b = torch.rand(d, V, generator=g) - 0.5
    out = torch.empty(2048, V)
    bt = b[:, :4096].contiguous()
    tile = torch.empty(2048, 4096)
    whole = tiled = math.inf
    with exact_fp32_matmul():
        torch.mm(a, b, out=out)
        torch.mm(a, bt, out=tile)
        for _ in range(repeats):
            t0 = time.perf_counter()
            torch.mm(a, b, out=out)
            whole = min(whole, time.perf_counter() - t0)
            t0 = time.perf_counter()
            for _ in range(-(-V // 4096)):
                torch.mm(a, bt, out=tile)
            tiled = min(tiled, (time.perf_counter() - t0) * V / (4096 * -(-V // 4096)))
    flops = 2.0 * 2048 * d * V
    return flops / whole, flops / tiled


def kernel_of(priv: Privatizer, case: str) -> str:
    """Which filter or key product the case runs."""
    if priv.engine.mechanism.kind == "additive":
        idx = priv.engine.mechanism.search_index(priv.engine.space)  # type: ignore[attr-defined]
        if idx._int8_rows(1) is not None and not case.endswith(FP32_SUFFIX):
            return f"int8 ({idx._int8_rows(1).kind})"
        return "bf16" if idx._use_bf16() else ("avx2 fused fp32" if idx._avx2_rows(1) is not None else "fp32")
    packed = priv.engine.mechanism.sampler_for(priv.engine.space)._kernel_targets()  # type: ignore[attr-defined]
    return "keys: " + ("float product" if packed is None else packed.kind)


#: a case name ending so runs without the int8 filter: the fused fp32 filter (AVX2) or bf16 (AVX-512 BF16)
FP32_SUFFIX = "+no-int8"


@contextmanager
def fp32_filter(on: bool) -> Iterator[None]:
    """With ``on``, the exact search without its int8 filter (the path before it) for the duration."""
    saved = ExactIndex._int8_rows
    if on:
        ExactIndex._int8_rows = lambda self, k, queries=0: None  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        ExactIndex._int8_rows = saved  # type: ignore[method-assign]


def run_cases(cases: list[str], texts: list[str], epsilon: float, passes: int) -> list[dict[str, object]]:
    """Passes of every case in turn (round-robin, so load from other processes reaches each case alike), each
    between two fp32 bound measurements."""
    privs, per_op, shapes = {}, {}, {}
    for case in cases:
        mech, _, post = case.removesuffix(FP32_SUFFIX).partition("/")
        cfg = PrivatizerConfig(mechanism=mech, epsilon=epsilon, **({"postprocess": post} if post else {}))
        priv = Privatizer(cfg, seed=12345, split="bench", allow_weak_seed=True)
        priv.privatize(texts[:16])
        privs[case] = priv
        per_op[case], shapes[case] = work_per_token(priv, texts)
    rates: dict[str, list[float]] = {c: [] for c in cases}
    paired: dict[str, list[float]] = {c: [] for c in cases}
    whole: dict[str, list[float]] = {c: [] for c in cases}
    tiled: dict[str, list[float]] = {c: [] for c in cases}
    tokens = {}
    for _ in range(passes):
        for case in cases:
            priv = privs[case]
            w0, t0b = fp32_bounds(priv.engine.space.V, priv.engine.space.d)
            start = priv.totals.dp_tokens
            with fp32_filter(case.endswith(FP32_SUFFIX)):
                t0 = time.perf_counter()
                for s in range(0, len(texts), 1000):
                    priv.privatize(texts[s : s + 1000], row_ids=range(s, min(s + 1000, len(texts))))
                dt = time.perf_counter() - t0
            tokens[case] = priv.totals.dp_tokens - start
            w1, t1b = fp32_bounds(priv.engine.space.V, priv.engine.space.d)
            rate = tokens[case] / dt
            rates[case].append(rate)
            whole[case] += [w0 / per_op[case], w1 / per_op[case]]
            tiled[case] += [t0b / per_op[case], t1b / per_op[case]]
            paired[case].append(rate / (max(w0, w1) / per_op[case]))
    out = []
    for case in cases:
        out.append(
            {
                "case": case,
                "kernel": kernel_of(privs[case], case),
                "tokens": tokens[case],
                "shapes": shapes[case],
                "tokens_per_s": max(rates[case]),
                "all_rates": [round(r) for r in rates[case]],
                "bound_mm_tokens_per_s": max(whole[case]),
                "bound_tile_tokens_per_s": max(tiled[case]),
                "of_mm_best": max(rates[case]) / max(whole[case]),
                "of_tile_best": max(rates[case]) / max(tiled[case]),
                "of_mm_paired_median": statistics.median(paired[case]),
                "x_first_case_best": max(rates[case]) / max(rates[cases[0]]),
                "x_first_case_per_round_median": statistics.median(
                    r / m for r, m in zip(rates[case], rates[cases[0]], strict=True)
                ),
            }
        )
    return out


def _brute(E64: torch.Tensor, sq: torch.Tensor, Q: torch.Tensor) -> list[int]:
    """Float64 brute force's nearest row of each query (ties to the lowest position): Σ(q − e_c)² in float64 over
    the rows within a generous margin of the float64 expansion's minimum, decided by exact rational arithmetic
    (``fractions.Fraction``) where two of them lie within 1e-12 (relative) of each other."""
    out = []
    for s in range(0, Q.shape[0], 1024):
        q = Q[s : s + 1024].double()
        D = (q**2).sum(1, keepdim=True) - 2.0 * q @ E64.T + sq
        scale = (q**2).sum(1, keepdim=True) + sq.max()
        near = D <= D.min(1, keepdim=True).values + 1e-9 * scale
        for i in range(q.shape[0]):
            cand = torch.nonzero(near[i]).squeeze(1)
            exact = ((E64[cand] - q[i]) ** 2).sum(1)
            close = cand[exact <= exact.min() * (1 + 1e-12) + 1e-300]
            if close.numel() > 1:  # a near tie: exact arithmetic
                qf = [Fraction(float(x)) for x in q[i]]
                dist = [sum((a - Fraction(float(b))) ** 2 for a, b in zip(qf, E64[c], strict=True)) for c in close]
                out.append(min(zip(dist, close.tolist(), strict=True))[1])
            else:
                out.append(int(close[0]))
    return out


def _tie_queries(E: torch.Tensor, pos: torch.Tensor, n: int) -> torch.Tensor:
    """Ties and near ties on MR tokens: each token's own row (duplicated rows then tie at distance 0), and the
    fp32 midpoints of pairs of MR tokens' rows nudged by 0 or ±1 ulp (bisectors: equal or nearly equal distances)."""
    g = torch.Generator().manual_seed(58)
    a = pos[torch.randint(0, pos.numel(), (n,), generator=g)]
    b = pos[torch.randint(0, pos.numel(), (n,), generator=g)]
    mid = ((E[a].double() + E[b].double()) / 2).float()
    up = torch.nextafter(mid, torch.full_like(mid, math.inf))
    down = torch.nextafter(mid, torch.full_like(mid, -math.inf))
    return torch.cat([E[a], mid, up, down])


def mismatches(texts: list[str], epsilons: tuple[float, ...], filters: tuple[str, ...]) -> list[dict[str, object]]:
    """madlib's noisy vectors of the MR tokens at each ε, and :func:`_tie_queries`, searched by an index of the
    privatizer's rows with each filter against :func:`_brute`; with the int8 filter also its candidates per query
    (mean, 99th percentile, largest) and its error margins (mean η, mean of the widest Up − Lo per query)."""
    priv = Privatizer(PrivatizerConfig(mechanism="madlib", epsilon=10.0), seed=1, split="bench", allow_weak_seed=True)
    priv.privatize(texts[:1])  # sets up the tokenization that _candidate_positions reads
    space, mech = priv.engine.space, priv.engine.mechanism
    E = mech.search_index(space).E  # type: ignore[attr-defined]
    pos = torch.from_numpy(_candidate_positions(priv, texts))
    E64 = E.double()
    sq = (E64**2).sum(1)
    sets: dict[str, torch.Tensor] = {}
    for k, eps in enumerate(epsilons):
        m = type(mech)(epsilon=eps)
        st = streams_for_rows([derive_row_seed(41, k, "avx2-check", 0)], [int(pos.numel())], space.device)
        sets[f"eps={eps:g}"] = m.perturb(m.inputs(space, pos), st)  # type: ignore[attr-defined]
    sets["ties"] = _tie_queries(E, pos, 500)
    truth = {name: _brute(E64, sq, Z) for name, Z in sets.items()}
    out: list[dict[str, object]] = []
    for filt in filters:
        index = ExactIndex(E, filter=filt)  # type: ignore[arg-type]
        for name, Z in sets.items():
            got = index.search(Z, 1)[:, 0].tolist()
            row: dict[str, object] = {"filter": filt, "queries": name, "tokens": len(got)}
            row["mismatches"] = sum(int(x != y) for x, y in zip(got, truth[name], strict=True))
            rows8 = index._int8_rows(1) if filt == "int8" else None
            if rows8 is not None:
                r, _, dropped = int8_candidates(rows8, Z, 1, torch.get_num_threads())
                counts = torch.bincount(r, minlength=Z.shape[0]).double()
                row["int8_kernel"] = rows8.kind
                row["candidates_mean"] = round(float(counts.mean()), 2)
                row["candidates_p99"] = float(counts.quantile(0.99))
                row["candidates_max"] = int(counts.max())
                row["lists_overflowed"] = int(dropped.numel())
            out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4000)
    ap.add_argument("--passes", type=int, default=4)
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--check-rows", type=int, default=2000)
    ap.add_argument("--cases", default=f"madlib/nearest,madlib/nearest{FP32_SUFFIX},tem,santext")
    ap.add_argument("--filters", default="int8,fp32", help="the exact search's filters the mismatch check runs")
    args = ap.parse_args()
    texts = [json.loads(line)["text"] for line in MR.read_text(encoding="utf-8").splitlines()[: args.rows]]
    flags = sorted(f for f in effective_flags() if f.startswith(("avx", "fma", "f16c", "amx")))
    print(json.dumps({"isa": isa_override(), "flags_seen": flags, "native": native_arithmetic()}))
    print(json.dumps({"threads": torch.get_num_threads(), "rows": len(texts), "passes": args.passes}))
    if args.passes > 0:
        for row in run_cases(args.cases.split(","), texts, args.epsilon, args.passes):
            print(json.dumps(row), flush=True)
    if args.check_rows:
        for row in mismatches(texts[: args.check_rows], (1.0, 10.0, 100.0), tuple(args.filters.split(","))):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
