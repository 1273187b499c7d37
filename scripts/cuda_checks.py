"""GPU checks of issue 20 that are measurements, not tests: exactness on MR and CPU/CUDA agreement.

Usage (on a machine with a GPU; MODEL a model folder or hub id, MR the SentEval MR .jsonl):

    python scripts/cuda_checks.py --model MODEL --text MR --out cuda_checks.json [--steps sweep,exactness,...]

* **exactness** — madlib's noisy vectors of every privatized token of the text (both piece classes) at
  ε = 5 and ε = 20, searched on the GPU by the fused kernels, against float64 brute force: the 8 nearest
  by a float64 product, then the direct float64 sums Σ(q − e)² of those 8, ties to the lowest position.
* **agreement** — the same seeded rows privatized on CPU and on CUDA by madlib, tem, santext and privemb: the
  share of tokens (and rows) with the same ids.
* **sweep** — the fused search's time on the ε = 20 queries for a few tile shapes (HF_TEXTDP_CUDA_TILES);
  the later steps run with the fastest.
* **int_sweep** — tem's device pass for a few tile shapes of the int8 kernel (HF_TEXTDP_CUDA_INT_TILES).
* **profile** — torch.profiler tables of one device pass of madlib and of tem (``profile_*.txt``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback

import torch

from hf_textdp import Privatizer, PrivatizerConfig
from hf_textdp.tools.bench import device_inputs


def texts_of(path: str, rows: int | None) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        out = [json.loads(line)["text"] for line in fh if line.strip()]
    return out[:rows] if rows else out


def class_queries(priv: Privatizer, texts: list[str]):
    """Per piece class: (index, noisy vectors on the GPU) for every privatized token of ``texts``."""
    flat, streams = device_inputs(priv, texts)
    out = []
    if len(priv.engine._releases) == 1:
        groups = [(priv.engine._releases[0], flat, streams)]
    else:
        cls = priv.engine._class_of[flat]
        groups = []
        for rel in priv.engine._releases:
            mask = cls == rel.part.index
            groups.append((rel, priv.engine._local[flat[mask]], streams.select(mask)))
    for rel, local, st in groups:
        z = rel.mech.perturb_positions(rel.part.space, local, st)
        out.append((rel.mech.search_index(rel.part.space), z))
    return out


def brute_force(Q: torch.Tensor, E: torch.Tensor) -> torch.Tensor:
    E64 = E.double()
    n64 = (E64 * E64).sum(1)
    res = []
    for s in range(0, Q.shape[0], 8192):
        q = Q[s : s + 8192].double()
        approx = n64[None, :] - 2.0 * q @ E64.T  # + ‖q‖², the same for every row
        top = approx.topk(8, dim=1, largest=False).indices  # [b, 8]
        D = ((q[:, None, :] - E64[top]) ** 2).sum(2)
        best = D.min(1, keepdim=True).values
        pos = torch.where(D == best, top, torch.iinfo(torch.int64).max).min(1).values
        res.append(pos)
    return torch.cat(res).cpu()


def exactness(model: str, texts: list[str], report: dict) -> None:
    for eps in (5.0, 20.0):
        priv = Privatizer(
            PrivatizerConfig(mechanism="madlib", epsilon=eps, model=model, device="cuda"), seed=2**40 + 7
        )
        priv.privatize(texts[:4])
        total = mism = fallback = 0
        for index, z in class_queries(priv, texts):
            before = index.fallback_queries
            got = index.search(z, 1)[:, 0]
            ref = brute_force(z, index.E)
            total += int(got.numel())
            mism += int((got != ref).sum())
            fallback += index.fallback_queries - before
        report[f"exactness_eps{eps:g}"] = {"tokens": total, "mismatches": mism, "fallback_queries": fallback}
        print(f"exactness eps={eps:g}: {total:,} tokens, {mism} mismatches, {fallback} fallbacks", flush=True)


def agreement(model: str, texts: list[str], report: dict) -> None:
    for mech, opts in (("madlib", {}), ("tem", {}), ("santext", {}), ("privemb", {})):
        ids = {}
        for dev in ("cpu", "cuda"):
            cfg = PrivatizerConfig(mechanism=mech, epsilon=10.0, model=model, device=dev, options=opts)
            p = Privatizer(cfg, seed=2**40 + 2026)
            out = []
            for s in range(0, len(texts), 500):
                out += p({"text": texts[s : s + 500]}, list(range(s, min(s + 500, len(texts)))))["input_ids"]
            ids[dev] = out
        rows_same = sum(a == b for a, b in zip(ids["cpu"], ids["cuda"], strict=True))
        tok = sum(len(a) for a in ids["cpu"])
        tok_same = sum(
            sum(x == y for x, y in zip(a, b, strict=True)) for a, b in zip(ids["cpu"], ids["cuda"], strict=True)
        )
        report[f"agreement_{mech}"] = {
            "rows": len(texts),
            "rows_same": rows_same,
            "tokens": tok,
            "tokens_same": tok_same,
        }
        print(
            f"agreement {mech}: rows {rows_same}/{len(texts)}, tokens {tok_same}/{tok} ({tok_same / tok:.6%})",
            flush=True,
        )


def _sweep(env: str, configs: list[str], run, n: int, key: str, unit: str, report: dict) -> None:
    """Time ``run()`` (n items) with ``env`` set to each config (best of 3 after a warm-up); the fastest stays set."""
    out: dict = {}
    for cfg in configs:
        os.environ[env] = cfg
        try:
            run()  # compile, operands
            torch.cuda.synchronize()
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                run()
                torch.cuda.synchronize()
                best = min(best, time.perf_counter() - t0)
            out[cfg] = n / best
            print(f"{key} {cfg}: {n / best:,.0f} {unit}", flush=True)
        except Exception as err:  # noqa: BLE001 - a shape that does not compile is a result too
            out[cfg] = f"{type(err).__name__}: {str(err)[:200]}"
            print(f"{key} {cfg}: failed {out[cfg]}", flush=True)
    report[f"{key}_rates"] = out
    rates = {c: r for c, r in out.items() if isinstance(r, float)}
    if rates:  # the later steps run with the fastest shape (the answers are the same for every shape)
        best_cfg = max(rates, key=lambda c: rates[c])
        os.environ[env] = best_cfg
        report[f"{key}_best"] = best_cfg
        print(f"{key} best: {best_cfg}", flush=True)
    else:
        os.environ.pop(env, None)


def sweep(model: str, texts: list[str], report: dict) -> None:
    """The fused search alone on the ε = 20 queries of all the text, for a few tile shapes (HF_TEXTDP_CUDA_TILES)."""
    priv = Privatizer(PrivatizerConfig(mechanism="madlib", epsilon=20.0, model=model, device="cuda"), seed=2**40 + 7)
    priv.privatize(texts[:4])
    groups = class_queries(priv, texts)
    n = sum(int(z.shape[0]) for _, z in groups)
    configs = [
        "128,64,128,8,4,p",  # the default
        "128,64,128,8,3,p",
        "128,64,128,4,3,p",
        "128,32,128,4,3,p",
        "128,64,128,8,2,p",
        "64,64,128,4,4,p",
        "128,128,128,8,3,p",
        "256,64,64,8,3,l",
        "256,64,128,8,3,l",
    ]

    def run() -> None:
        for index, z in groups:
            index.search(z, 1)

    _sweep("HF_TEXTDP_CUDA_TILES", configs, run, n, "sweep", f"queries/s (search only, {n:,} queries)", report)


def int_sweep(model: str, texts: list[str], report: dict) -> None:
    """tem's device pass for a few tile shapes of the int8 kernel (HF_TEXTDP_CUDA_INT_TILES)."""
    priv = Privatizer(PrivatizerConfig(mechanism="tem", epsilon=10.0, model=model, device="cuda"), seed=2**40 + 7)
    priv.privatize(texts[:4])
    positions, streams = device_inputs(priv, texts)
    configs = ["256,128,64,8,3", "128,128,64,8,3", "128,128,128,8,3", "128,256,64,8,3", "64,128,128,4,3"]
    n = int(positions.numel())
    _sweep(
        "HF_TEXTDP_CUDA_INT_TILES", configs, lambda: priv.engine.release_streams(positions, streams), n, "int_sweep",
        "tokens/s (tem, device pass)", report,
    )  # fmt: skip


def profile(model: str, texts: list[str], report: dict, out_dir: str) -> None:
    """torch.profiler tables of one device pass (no tokenizing or decoding) of madlib and of tem."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    for mech in ("madlib", "tem"):
        priv = Privatizer(PrivatizerConfig(mechanism=mech, epsilon=10.0, model=model, device="cuda"), seed=2**40 + 7)
        priv.privatize(texts[:4])
        positions, streams = device_inputs(priv, texts)
        priv.engine.release_streams(positions, streams)
        torch.cuda.synchronize()
        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True) as prof:
            t0 = time.perf_counter()
            priv.engine.release_streams(positions, streams)
            torch.cuda.synchronize()
            wall = time.perf_counter() - t0
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25)
        with open(os.path.join(out_dir, f"profile_{mech}.txt"), "w", encoding="utf-8") as fh:
            fh.write(f"{mech}: {positions.numel():,} tokens, {wall * 1e3:.1f} ms under the profiler\n{table}\n")
        # the timeline: the GPU's idle gaps, with the Python behind them
        prof.export_chrome_trace(os.path.join(out_dir, f"trace_{mech}.json"))
        report[f"profile_{mech}_ms"] = wall * 1e3
        print(f"profile {mech}: {wall * 1e3:.1f} ms for {positions.numel():,} tokens (profiled)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--agreement-rows", type=int, default=2000)
    ap.add_argument("--steps", default="sweep,exactness,agreement,profile", help="comma-separated, run in order")
    ap.add_argument("--tiles-out", default=None, help="write the sweep's fastest tile shape to this file")
    args = ap.parse_args()
    report: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    texts = texts_of(args.text, None)
    out_dir = os.path.dirname(os.path.abspath(args.out))
    known = {
        "sweep": lambda: sweep(args.model, texts, report),
        "int_sweep": lambda: int_sweep(args.model, texts, report),
        "exactness": lambda: exactness(args.model, texts, report),
        "agreement": lambda: agreement(args.model, texts[: args.agreement_rows], report),
        "profile": lambda: profile(args.model, texts, report, out_dir),
    }
    steps = [(name, known[name]) for name in args.steps.split(",")]
    for name, step in steps:
        t0 = time.perf_counter()
        try:
            step()
        except Exception:  # noqa: BLE001 - report and go on to the next check
            report[f"{name}_error"] = traceback.format_exc()[-2000:]
            print(report[f"{name}_error"], flush=True)
        report[f"{name}_seconds"] = time.perf_counter() - t0
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=1)
        if name == "sweep" and args.tiles_out and "sweep_best" in report:
            with open(args.tiles_out, "w", encoding="utf-8") as fh:
                fh.write(report["sweep_best"])
        if name == "int_sweep" and args.tiles_out and "int_sweep_best" in report:
            with open(args.tiles_out + ".int", "w", encoding="utf-8") as fh:
                fh.write(report["int_sweep_best"])


if __name__ == "__main__":
    main()
