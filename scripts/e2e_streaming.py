"""Issue 58 item 3's measurement: the CLI end to end against the kernel alone, both in this one process.

The input is SentEval MR repeated ``--copies`` times (MR × 10 = 106,620 rows, 2.7 M privatized tokens). The kernel
figure is ``ReleaseEngine.release_streams`` over every privatized token of one copy of MR in one call (noise and
exact search; tokenizing, key derivation, decoding and writing excluded), best of ``--kernel-repeats``; the CLI
figure is ``hf-textdp privatize IN OUT --streaming`` run in this process (``cli.app.main``), its privatized tokens
(the report's) over its wall time, start-up of the command included. Each CLI run is paired with kernel passes just
before and after it, so load from other processes reaches both::

    HF_HUB_OFFLINE=1 python scripts/e2e_streaming.py --copies 10 --runs 2
    HF_HUB_OFFLINE=1 python scripts/e2e_streaming.py --copies 1 --no-streaming --runs 3   # one MR-sized file
    HF_HUB_OFFLINE=1 python scripts/e2e_streaming.py --copies 2 --profile /tmp/cli.prof  # cProfile of a CLI run
    python -c "import pstats; pstats.Stats('/tmp/cli.prof').sort_stats('cumulative').print_stats(40)"

(cProfile follows one thread: a profiled run privatizes each shard on the main thread, without the prefetch, so
its wall time is not the unprofiled run's.)

With ``--no-streaming`` (a single in-memory file) it also states the fixed costs: the command's time before the
first batch is privatized (start: arguments, config, model and space), the time to read the input, and the time
to write the output and its report.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from hf_textdp import Privatizer, PrivatizerConfig
from hf_textdp.cli import app
from hf_textdp.cpu.features import effective_flags
from hf_textdp.io.paths import report_path_for
from hf_textdp.run import pipeline, sharded, streaming
from hf_textdp.tools.bench.cases import device_inputs


MR = Path("/work/shared/data/senteval/mr.jsonl")
SEED = "0x4c1f0e58a4b13d7e"


def kernel_rate(texts: list[str], mechanism: str, epsilon: float, repeats: int) -> tuple[float, int]:
    """(best tokens/s of release_streams over ``texts``' privatized tokens in one call, those tokens)."""
    priv = Privatizer(PrivatizerConfig(mechanism=mechanism, epsilon=epsilon), seed=int(SEED, 16))
    priv.privatize(texts[:16])
    positions, streams = device_inputs(priv, texts)
    priv.engine.release_streams(positions, streams)  # warm-up: operands packed
    best = float("inf")
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        priv.engine.release_streams(positions, streams)
        best = min(best, time.perf_counter() - t0)
    return positions.numel() / best, int(positions.numel())


class _Clock:
    """Wall-clock marks of a CLI run: when privatization starts, when the source was read, when writing starts."""

    def __init__(self) -> None:
        self.marks: dict[str, float] = {}
        self._patches: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, name: str, mark: str, *, after: bool = False) -> None:
        inner = getattr(owner, name)

        def timed(*a: Any, **kw: Any) -> Any:
            if not after:
                self.marks.setdefault(mark, time.perf_counter())
            out = inner(*a, **kw)
            if after:
                self.marks.setdefault(mark, time.perf_counter())
            return out

        self._patches.append((owner, name, inner))
        setattr(owner, name, timed)

    def restore(self) -> None:
        for owner, name, inner in reversed(self._patches):
            setattr(owner, name, inner)


def cli_run(args: list[str], out: Path, profile: str | None) -> dict[str, Any]:
    """Run ``hf-textdp privatize`` in this process: wall seconds, privatized tokens, and the fixed costs' marks."""
    clock = _Clock()
    clock.wrap(pipeline, "load_source", "read", after=True)
    clock.wrap(Privatizer, "__call__", "first_batch")
    clock.wrap(streaming, "save_output", "write")
    clock.wrap(sharded, "save_output", "write")
    prof = cProfile.Profile() if profile else None
    if prof and hasattr(streaming, "ahead"):  # cProfile sees one thread: privatize each shard on this one
        clock._patches.append((streaming, "ahead", streaming.ahead))
        streaming.ahead = lambda items, *a, **kw: iter(items)
    t0 = time.perf_counter()
    try:
        if prof:
            prof.enable()
        rc = app.main(args)
        if prof:
            prof.disable()
    finally:
        clock.restore()
    wall = time.perf_counter() - t0
    if prof and profile:
        prof.dump_stats(profile)
    report = json.loads(report_path_for(out).read_text(encoding="utf-8"))
    marks = {k: round(v - t0, 3) for k, v in clock.marks.items()}
    return {"rc": rc, "wall_s": round(wall, 2), "tokens": int(report["totals"]["dp_tokens"]), "marks": marks}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--kernel-repeats", type=int, default=2)
    ap.add_argument("--mechanism", default="madlib")
    ap.add_argument("--epsilon", type=float, default=100.0)
    ap.add_argument("--no-streaming", action="store_true")
    ap.add_argument("--profile", default=None)
    args = ap.parse_args()
    rows = MR.read_text(encoding="utf-8").splitlines()
    texts = [json.loads(line)["text"] for line in rows]
    flags = sorted(f for f in effective_flags() if f in ("avx2", "avx512_bf16", "avx512_vnni", "amx_int8"))
    print(json.dumps({"flags_seen": flags, "threads": torch.get_num_threads(), "load": os.getloadavg()}))
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "mr_x.jsonl"
        src.write_text("\n".join(rows * args.copies) + "\n", encoding="utf-8")
        for run in range(args.runs):
            k0, n_tok = kernel_rate(texts, args.mechanism, args.epsilon, args.kernel_repeats)
            out = Path(tmp) / f"out{run}.jsonl"
            cli = [
                "privatize", str(src), str(out), "--mechanism", args.mechanism, "--epsilon", str(args.epsilon),
                "--seed", SEED, "--overwrite",
            ]  # fmt: skip
            if not args.no_streaming:
                cli.append("--streaming")
            res = cli_run(cli, out, args.profile if run == 0 else None)
            k1, _ = kernel_rate(texts, args.mechanism, args.epsilon, args.kernel_repeats)
            rate = res["tokens"] / res["wall_s"]
            row = {
                "run": run,
                "rows": len(rows) * args.copies,
                "streaming": not args.no_streaming,
                **res,
                "cli_tokens_per_s": round(rate),
                "kernel_tokens_per_s": [round(k0), round(k1)],
                "kernel_tokens": n_tok,
                "cli_over_kernel": round(rate / max(k0, k1), 3),
                "load": [round(x, 2) for x in os.getloadavg()],
            }
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
