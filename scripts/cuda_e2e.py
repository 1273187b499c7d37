"""End-to-end rate on a GPU with host workers: ``privatize_dataset(num_proc=P)`` over MR text repeated.

One process tokenizes and decodes at about 0.7 M tokens/s (``scripts/host_throughput.py``), whatever the
GPU. With ``num_proc`` on CUDA the workers do that host work on CPU and the parent process releases their
batches on the GPU (``hf_textdp/run/release_service.py``; its summary line, at INFO, says how long it
worked); ``--service-off`` gives each worker a CUDA context of its own instead. MR alone (0.27 M tokens)
is over before the workers have started, so the corpus is MR repeated ``--repeat`` times (the rows get
their own ids, so every copy draws fresh noise); it is loaded before the clock starts.

    python scripts/cuda_e2e.py --model MODEL --text MR --repeat 40 --num-proc 8,16 --out e2e.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--num-proc", default="8,16")
    ap.add_argument("--mechanism", default="madlib")
    ap.add_argument("--batch-size", type=int, default=2048)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", required=True)
    ap.add_argument("--service-off", action="store_true", help="each worker holds a CUDA context (no release service)")
    ap.add_argument("--output", action="store_true", help="save to a folder (shards of 10,000 rows), as users do")
    args = ap.parse_args()
    if args.service_off:
        os.environ["HF_TEXTDP_RELEASE_SERVICE_OFF"] = "1"
    with open(args.text, encoding="utf-8") as fh:
        lines = [line for line in fh if line.strip()]
    corpus = os.path.join(tempfile.mkdtemp(), "corpus.jsonl")
    with open(corpus, "w", encoding="utf-8") as fh:
        for _ in range(args.repeat):
            fh.writelines(lines)
    # compile the kernels once, in a process of its own (Triton's disk cache serves the workers; the parent
    # must not touch CUDA before datasets forks them)
    warm = (
        "from hf_textdp import Privatizer, PrivatizerConfig;"
        f"p = Privatizer(PrivatizerConfig(mechanism={args.mechanism!r}, epsilon=10.0, model={args.model!r}, "
        f"device={args.device!r}), seed=2**40 + 1); p.privatize(['a warm-up review of a film'] * 64)"
    )
    subprocess.run([sys.executable, "-c", warm], check=True)
    import datasets

    from hf_textdp import PrivatizerConfig, privatize_dataset
    from hf_textdp.utils.logging import set_verbosity_info

    set_verbosity_info()  # the release service's summary: batches, calls, time releasing
    t0 = time.perf_counter()
    data = datasets.load_dataset("json", data_files=corpus, split="train")
    print(f"corpus: {len(data):,} rows loaded in {time.perf_counter() - t0:.1f} s (not in the rates below)")

    report: dict = {
        "rows": len(lines) * args.repeat,
        "repeat": args.repeat,
        "mechanism": args.mechanism,
        "release_service": not args.service_off,
        "output_dir": args.output,
    }
    for p in (int(v) for v in args.num_proc.split(",")):
        cfg = PrivatizerConfig(mechanism=args.mechanism, epsilon=10.0, model=args.model, device=args.device)
        t0 = time.perf_counter()
        # a seed per run: datasets' cache (keyed by the privatizer's fingerprint) must not serve a later run
        saved = {"output_dir": os.path.join(tempfile.mkdtemp(), "out")} if args.output else {}
        ds = privatize_dataset(data, cfg, seed=2**40 + 2026 + p, num_proc=p, batch_size=args.batch_size, **saved)
        wall = time.perf_counter() - t0
        tokens = int(sum(ds["dp_tokens"]))
        report[f"num_proc_{p}"] = {"tokens": tokens, "seconds": wall, "tokens_per_s": tokens / wall}
        mode = "release service" if args.device.startswith("cuda") else "CPU workers"
        mode = "workers with their own CUDA context" if args.service_off else mode
        mode += ", saved in shards" if args.output else ""
        rate = f"{tokens:,} tokens in {wall:.1f} s = {tokens / wall:,.0f} tokens/s"
        print(f"e2e {args.mechanism} num_proc={p} ({mode}): {rate}")
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=1)


if __name__ == "__main__":
    main()
