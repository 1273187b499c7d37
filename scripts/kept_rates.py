"""Kept-token rates of madlib + nearest on MR with the default model (issue 3 closing figures).

Usage: python scripts/kept_rates.py [--mr ../shared/data/senteval/mr.jsonl] [--epsilons 10,40,80,100,200]
Prints, per ε, the fraction of privatized tokens whose id is unchanged, and tokens/s.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from hf_textdp import Privatizer, PrivatizerConfig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mr", default="../shared/data/senteval/mr.jsonl")
    ap.add_argument("--epsilons", default="10,40,80,100,200")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--seed", type=int, default=20261122)
    args = ap.parse_args()
    texts = [json.loads(line)["text"] for line in open(args.mr, encoding="utf-8")]
    if args.rows:
        texts = texts[: args.rows]
    print(f"{len(texts)} MR sentences")
    print("| epsilon | kept | replaced | privatized tokens | seconds | tokens/s |")
    print("|---|---|---|---|---|---|")
    for eps in [float(x) for x in args.epsilons.split(",")]:
        # MR is public benchmark data and the seed a public one (it reproduces the README's table)
        priv = Privatizer(PrivatizerConfig(epsilon=eps), seed=args.seed, allow_weak_seed=True)
        priv.privatize(texts[:5])
        tok = priv.engine.space.tokenizer
        t0 = time.perf_counter()
        out = priv({"text": texts}, list(range(len(texts))))
        dt = time.perf_counter() - t0
        kept = total = 0
        enc = tok(texts, add_special_tokens=True, split_special_tokens=True)["input_ids"]
        cand = set(priv.engine.space.candidate_ids.tolist())
        for a, b in zip(enc, out["input_ids"], strict=False):
            a_arr, b_arr = np.array(a), np.array(b)
            mask = np.fromiter((i in cand for i in a), bool, len(a))
            kept += int((a_arr[mask] == b_arr[mask]).sum())
            total += int(mask.sum())
        print(f"| {eps:g} | {kept / total:.3f} | {1 - kept / total:.3f} | {total} | {dt:.1f} | {total / dt:.0f} |")


if __name__ == "__main__":
    main()
