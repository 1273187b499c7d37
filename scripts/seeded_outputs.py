"""Fingerprint the seeded outputs of every mechanism and post-processing step on 500 MR rows.

A refactor that must not change behaviour is checked by running this before and after and comparing
the printed sha256 per configuration (``rows_sha256``: the output columns; ``sha256``: also the claim;
``ids_sha256``: the columns but the text, which a change of decoding alone keeps).

    python scripts/seeded_outputs.py OUT.json [--mr ../shared/data/senteval/mr.jsonl] [--vectors FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from typing import Any


os.environ.setdefault("HF_HUB_OFFLINE", "1")

from hf_textdp import Privatizer, PrivatizerConfig  # noqa: E402


SEED = 0x5EED_1234_ABCD_9876


def configs(corpus: str, vectors: str | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        dict(mechanism="madlib", epsilon=12.0),
        dict(mechanism="madlib", epsilon=12.0, postprocess="top2"),
        dict(mechanism="madlib", epsilon=12.0, postprocess="rank"),
        dict(mechanism="laplace", epsilon=40.0),
        dict(mechanism="gaussian", epsilon=40.0, delta=1e-5),
        dict(mechanism="truncated_laplace", epsilon=40.0),
        dict(mechanism="privemb", epsilon=12.0),
        dict(mechanism="mahalanobis", epsilon=12.0),
        dict(mechanism="tem", epsilon=3.0),
        dict(mechanism="santext", epsilon=3.0),
        dict(mechanism="santext_plus", epsilon=3.0, options={"frequency_corpus": corpus}),
        dict(mechanism="tem", epsilon=30.0),
        dict(mechanism="santext", epsilon=30.0),
        dict(mechanism="truncated_laplace", epsilon=8.0, options={"calibration": "reference_code"}),
    ]
    if vectors:
        out.append(dict(mechanism="madlib", epsilon=12.0, model=vectors))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--mr", default="../shared/data/senteval/mr.jsonl")
    ap.add_argument("--corpus", default="../shared/data/senteval/cr.jsonl", help="santext_plus frequency corpus")
    ap.add_argument("--vectors", default=None, help="a word-vector file for one static-vector case")
    ap.add_argument(
        "--candidates",
        default=None,
        help='candidate setting, a name or JSON (\'{"set": "all", "classes": "mix"}\': the setting before issue 17)',
    )
    args = ap.parse_args()
    with open(args.mr, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    texts = [r["text"] for r in rows[::21][:500]]  # MR is sorted by label: a stride mixes both
    result = {}
    for cfg in configs(args.corpus, args.vectors):
        name = "/".join(f"{k}={v}" for k, v in cfg.items())
        cfg = dict(cfg)
        if args.candidates is not None:
            cand = args.candidates
            cfg["candidates"] = json.loads(cand) if cand.lstrip().startswith("{") else cand
        config = PrivatizerConfig(mechanism=cfg.pop("mechanism"), epsilon=cfg.pop("epsilon"), **cfg)
        priv = Privatizer(config, seed=SEED)
        res = priv({"text": texts}, list(range(len(texts))))
        rows_blob = json.dumps(res, sort_keys=True, default=str).encode()
        blob = json.dumps({"res": res, "claim": repr(priv.engine.claim)}, sort_keys=True, default=str).encode()
        ids_blob = json.dumps({k: v for k, v in res.items() if k != "text"}, sort_keys=True, default=str).encode()
        result[name] = {
            "rows_sha256": hashlib.sha256(rows_blob).hexdigest(),
            "sha256": hashlib.sha256(blob).hexdigest(),
            "ids_sha256": hashlib.sha256(ids_blob).hexdigest(),  # without the text: a decoding change keeps it
        }
        print(result[name]["rows_sha256"][:16], name, flush=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
