"""The host side of privatizing, alone: tokenize, classify, decode and build the columns, with the release
(noise and search) replaced by the identity. On a GPU this host work bounds the end-to-end rate.

    python scripts/host_throughput.py [--text MR] [--rows N] [--batch-size 4096] [--repeats 3] [--model M]

Prints the best of ``--repeats`` passes over the rows (after one warm-up pass) in seconds and privatized
tokens per second.
"""

from __future__ import annotations

import argparse
import json
import os
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")

from hf_textdp import Privatizer, PrivatizerConfig  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", default=os.path.join("..", "shared", "data", "senteval", "mr.jsonl"))
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", default=None)
    args = ap.parse_args()
    with open(args.text, encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for line in fh if line.strip()][: args.rows]
    cfg = PrivatizerConfig(mechanism="madlib", epsilon=10.0, **({"model": args.model} if args.model else {}))
    # public benchmark text with a public seed: not a privacy key
    priv = Privatizer(cfg, seed=2**40 + 1, split="bench", allow_weak_seed=True)
    tokens = 0

    def identity(positions, sizes, row_ids, **_kw):
        nonlocal tokens
        tokens += int(positions.numel())
        return positions.clone()

    priv.privatize(texts[:16])
    priv.engine.release_flat = identity  # type: ignore[method-assign]
    best = float("inf")
    for rep in range(args.repeats + 1):
        tokens = 0
        t0 = time.perf_counter()
        for s in range(0, len(texts), args.batch_size):
            priv.privatize(texts[s : s + args.batch_size], list(range(s, min(s + args.batch_size, len(texts)))))
        if rep:  # the first pass warms the caches
            best = min(best, time.perf_counter() - t0)
    print(f"host side: {len(texts):,} rows, {tokens:,} tokens in {best:.3f} s = {tokens / best:,.0f} tokens/s")


if __name__ == "__main__":
    main()
