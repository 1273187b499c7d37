"""Time ``privatize_dataset(..., output_dir=..., num_proc=P)`` over MR rows in shards: the cost of the workers.

    python scripts/shard_workers.py [--rows 4000] [--shard-size 1000] [--num-proc 2] [--spawn]

``--spawn`` starts the workers as a GPU run does (spawned, not forked); the release itself runs on CPU.
Prints the wall time; the output goes to a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    import datasets

    from hf_textdp import PrivatizerConfig, privatize_dataset
    from hf_textdp.run.workers import spawned_workers

    ap = argparse.ArgumentParser()
    ap.add_argument("--text", default=os.path.join("..", "shared", "data", "senteval", "mr.jsonl"))
    ap.add_argument("--rows", type=int, default=4000)
    ap.add_argument("--shard-size", type=int, default=1000)
    ap.add_argument("--num-proc", type=int, default=2)
    ap.add_argument("--spawn", action="store_true", help="spawned workers, as on a GPU")
    args = ap.parse_args()
    with open(args.text, encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for line in fh if line.strip()][: args.rows]
    ds = datasets.Dataset.from_dict({"text": texts})
    cfg = PrivatizerConfig(mechanism="madlib", epsilon=10.0)
    out = os.path.join(tempfile.mkdtemp(), "out")
    t0 = time.perf_counter()
    with spawned_workers("cuda" if args.spawn else "cpu", args.num_proc):  # the start method only
        # public benchmark text with a public seed: not a privacy key
        privatize_dataset(
            ds, cfg, seed=2**40 + 5, num_proc=args.num_proc, batch_size=1000, output_dir=out,
            shard_size=args.shard_size,
        )  # fmt: skip
    mode = "spawned" if args.spawn else "forked"
    print(f"{len(texts):,} rows, shards of {args.shard_size:,}, {args.num_proc} {mode} workers: "
          f"{time.perf_counter() - t0:.1f} s")  # fmt: skip


if __name__ == "__main__":
    main()
