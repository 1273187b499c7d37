"""Released ids with the CPU's compiled noise kernel against the tensor form, on all of SentEval MR.

The kernel (``hf_textdp/kernels/noise.c``) has its own logarithm, cosine and sine, so its normals can
differ from torch's by an ulp; a released id can then differ only at an exact float64 near-tie. This
privatizes every MR row with madlib, gaussian and privemb (ε = 10, one seed) twice, with the kernels on
and with ``HF_TEXTDP_NATIVE=0`` in a child process, and prints how many ids differ.

    python scripts/noise_kernel_agreement.py [--mr ../shared/data/senteval/mr.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any


os.environ.setdefault("HF_HUB_OFFLINE", "1")

MECHANISMS = ("madlib", "gaussian", "privemb")
SEED = 2**40 + 99  # public benchmark text: not a privacy key


def release(mr: str | None) -> dict[str, list[list[int]]]:
    from hf_textdp import Privatizer, PrivatizerConfig
    from hf_textdp.tools.bench import load_texts

    texts, _ = load_texts(mr, None)
    out: dict[str, list[list[int]]] = {}
    for mech in MECHANISMS:
        cfg = PrivatizerConfig(mechanism=mech, epsilon=10.0)
        priv = Privatizer(cfg, seed=SEED, split="agree", allow_weak_seed=True)
        ids: list[list[int]] = []
        for s in range(0, len(texts), 2000):
            batch = priv({"text": texts[s : s + 2000]}, list(range(s, min(s + 2000, len(texts)))))
            ids.extend(batch["input_ids"])
        out[mech] = ids
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mr", default=None, help="MR as jsonl (default: the bench's SentEval MR)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        json.dump(release(args.mr), sys.stdout)
        return
    on = release(args.mr)
    argv = [sys.executable, __file__, "--child", *(["--mr", args.mr] if args.mr else [])]
    env = dict(os.environ, HF_TEXTDP_NATIVE="0")
    off: dict[str, Any] = json.loads(subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout)
    for mech in MECHANISMS:
        pairs = [(a, b) for ra, rb in zip(on[mech], off[mech], strict=True) for a, b in zip(ra, rb, strict=True)]
        differ = sum(a != b for a, b in pairs)
        print(f"{mech:10s} rows {len(on[mech]):,}  ids {len(pairs):,}  differ {differ} ({differ / len(pairs):.2e})")


if __name__ == "__main__":
    main()
