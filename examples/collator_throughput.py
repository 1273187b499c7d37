"""Examples per second of the collators and ``PrivateTokenizer`` against the plain tokenizer.

    HF_HUB_OFFLINE=1 python examples/collator_throughput.py --data ../shared/data/senteval/mr.jsonl --limit 2000

Each row collates or tokenizes the same sentences in batches of ``--batch-size`` (padding, truncation
to ``--max-length``), after one warm-up batch; the time is the best of ``--repeats`` passes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections.abc import Callable
from typing import Any


def best_rate(fn: Callable[[list[Any]], Any], batches: list[list[Any]], repeats: int) -> float:
    fn(batches[0])  # warm-up: loads the matrix, builds the search index
    n = sum(len(b) for b in batches)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for b in batches:
            fn(b)
        best = min(best, time.perf_counter() - start)
    return n / best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--data", required=True, help="a .jsonl file with a text field")
    parser.add_argument("--limit", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--epsilon", type=float, default=100.0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoTokenizer

    from hf_textdp import (
        DataCollatorForInputsEmbeds,
        DataCollatorWithPrivatization,
        PrivateTokenizer,
        PrivatizerConfig,
    )
    from hf_textdp.io.models import resolve_model

    with open(args.data, encoding="utf-8") as f:
        rows = [json.loads(line) for line in itertools.islice(f, args.limit)]
    feats = [{"text": r["text"], "label": int(r.get("label", 0)), "idx": i} for i, r in enumerate(rows)]
    batches = [feats[i : i + args.batch_size] for i in range(0, len(feats), args.batch_size)]
    tok = AutoTokenizer.from_pretrained(resolve_model(args.model)[1])
    kw: dict[str, Any] = {"padding": True, "truncation": True, "max_length": args.max_length}
    config = PrivatizerConfig(epsilon=args.epsilon, model=args.model, device=args.device)
    vector = PrivatizerConfig(epsilon=args.epsilon, model=args.model, device=args.device, postprocess="vector")
    ptok = PrivateTokenizer(tok, config)
    collator = DataCollatorWithPrivatization(tok, config, max_length=args.max_length)
    embeds = DataCollatorForInputsEmbeds(tok, vector, max_length=args.max_length)

    def plain(b: list[Any]) -> Any:
        enc = tok([r["text"] for r in b], return_tensors="pt", **kw)
        enc["labels"] = torch.tensor([r["label"] for r in b])
        return enc

    cases: list[tuple[str, Callable[[list[Any]], Any]]] = [
        ("plain tokenizer (+ labels)", plain),
        ("PrivateTokenizer", lambda b: ptok([r["text"] for r in b], return_tensors="pt", **kw)),
        ("DataCollatorWithPrivatization", collator),
        ("DataCollatorForInputsEmbeds", embeds),
    ]
    print(
        f"{len(feats)} sentences, batch {args.batch_size}, max_length {args.max_length}, madlib ε={args.epsilon}, "
        f"{args.model}, device {args.device}, torch threads {torch.get_num_threads()}"
    )
    base = None
    for name, fn in cases:
        rate = best_rate(fn, batches, args.repeats)
        base = base or rate
        print(f"{name:32s} {rate:10.0f} examples/s   ({rate / base:.3f} × plain)")
    print("collator accounting:", collator.privacy_report()["training"])


if __name__ == "__main__":
    main()
