"""Where one ``Privatizer.privatize`` pass goes (issue 58): its parts from a cProfile, the case's own product bound in
seconds, and the fraction of that bound a pass would reach with its product exactly at the bound and every other part
as measured (the ceiling of ``hf-textdp bench``'s ``own`` column for that case on this machine).

    HF_HUB_OFFLINE=1 python scripts/pass_breakdown.py [--mechanism madlib/nearest] [--rows 2000] [--epsilon 10]

The bound is ``hf-textdp bench``'s (:func:`~hf_textdp.tools.bench.bounds.gemm_bounds`: the fastest native product of
the case's arithmetic, measured here before and after the pass, the better kept), held to the work the bench counts
per token (:func:`~hf_textdp.tools.bench.cases.work_per_token`). Parts: the search or key kernel (the compiled
filters' and samplers' ``run``), the float64 distances (``pair_sqdist``: verification, tries), reading and tokenizing
(``read_batch``), the noise (``perturb_positions``), decoding (``decode_flat``) and the rest. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")

from hf_textdp import Privatizer, PrivatizerConfig  # noqa: E402
from hf_textdp.tools.bench.bounds import gemm_bounds  # noqa: E402
from hf_textdp.tools.bench.cases import case_arithmetic, work_per_token  # noqa: E402
from hf_textdp.tools.bench.texts import load_texts  # noqa: E402


#: (file under hf_textdp/, function): a part's functions; "kernel" and "distances" add up their own time, the others
#: take the largest cumulative time among theirs (an override that calls the base class's holds that call)
PARTS = {
    "kernel": [("cpu/int8_filter.py", "run"), ("cpu/bf16_filter.py", "run"), ("cpu/int8_keys.py", "run")],
    "distances": [("cpu/distances.py", "pair_sqdist")],
    "read_tokenize": [("privatizer.py", "read_batch")],
    "noise": [("mechanisms/base.py", "perturb_positions"), ("mechanisms/madlib.py", "perturb_positions"),
              ("mechanisms/privemb.py", "perturb_positions"), ("mechanisms/bounded.py", "perturb_positions")],
    "decode": [("tokens.py", "decode_flat")],
}  # fmt: skip
OWN_TIME = {"kernel", "distances"}


def part_seconds(stats: pstats.Stats) -> dict[str, float]:
    """Seconds of each of :data:`PARTS` in ``stats``."""
    out = dict.fromkeys(PARTS, 0.0)
    for (path, _line, func), (_cc, _nc, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        for part, names in PARTS.items():
            if any(path.endswith("hf_textdp/" + file) and func == name for file, name in names):
                out[part] = out[part] + tottime if part in OWN_TIME else max(out[part], cumtime)
    return out


def main(argv: list[str] | None = None) -> dict[str, object]:
    """Runs the measurement, prints its JSON line and returns it."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mechanism", default="madlib/nearest", help="MECH[/POSTPROCESS], as the bench's --mechanism")
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--text", default=None, help="as the bench's --text (default: SentEval MR)")
    ap.add_argument("--model", default=None, help="as the bench's --model (default: all-MiniLM-L6-v2)")
    args = ap.parse_args(argv)
    texts, source = load_texts(args.text, args.rows)
    mech, _, post = args.mechanism.partition("/")
    extra = ({"postprocess": post} if post else {}) | ({"model": args.model} if args.model else {})
    cfg = PrivatizerConfig(mechanism=mech, epsilon=args.epsilon, **extra)
    # public benchmark text with a public seed: not a privacy key
    priv = Privatizer(cfg, seed=2**40 + 1, split="bench", allow_weak_seed=True)
    priv.privatize(texts)  # warm: caches, packed rows, compiled kernels
    space = priv.engine.space
    arith = case_arithmetic(args.mechanism, space)
    ops_per_token, shapes = work_per_token(priv, texts)
    bound = gemm_bounds(space.V, space.d)[arith]
    start = priv.totals.dp_tokens
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    priv.privatize(texts)
    prof.disable()
    wall = time.perf_counter() - t0
    tokens = priv.totals.dp_tokens - start
    after = gemm_bounds(space.V, space.d)[arith]
    ops = max(b for b in (bound, after) if b is not None)
    parts = part_seconds(pstats.Stats(prof))
    parts["rest"] = wall - sum(parts.values())
    bound_s = tokens * ops_per_token / ops
    outside = wall - parts["kernel"]
    result = {
        "case": args.mechanism, "text": source, "tokens": tokens, "arithmetic": arith, "shapes": shapes,
        "bound_ops_per_s": round(ops), "bound_s": round(bound_s, 6), "pass_s": round(wall, 6),
        "parts_s": {k: round(v, 6) for k, v in parts.items()},
        "pass_of_bound": round(bound_s / wall, 3),
        "kernel_of_bound": round(bound_s / parts["kernel"], 3) if parts["kernel"] > 0 else None,
        "ceiling_kernel_at_bound": round(bound_s / (bound_s + outside), 3),
        "load": [round(x, 2) for x in os.getloadavg()],
    }  # fmt: skip
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
