"""Issue 39's speed check: the built-in detectors over all of MR against one madlib pass over MR.

Usage: ``HF_HUB_OFFLINE=1 nice -n 10 python scripts/selective_speed.py [--data PATH] [--epsilon 100] [--repeats 3]``

Prints, for the default model (MiniLM): the seconds of the seven built-in detectors (their span union
included), of mapping the spans to token positions (the tokenization with offsets included), and of a madlib
pass (``Privatizer.privatize`` in batches of 1000, the model loaded and warmed up before the clock starts);
each the best of ``--repeats`` runs. The issue asks detection ≤ 10 % of the madlib pass.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from hf_textdp import Privatizer, PrivatizerConfig
from hf_textdp.sensitive import BUILTIN_DETECTORS, build_detectors, parse_sensitive, sensitive_mask, sensitive_spans
from hf_textdp.tokens import HFTokens


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared/data/senteval/mr.jsonl"))
    ap.add_argument("--epsilon", type=float, default=100.0)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    texts = [json.loads(line)["text"] for line in Path(args.data).read_text(encoding="utf-8").splitlines()]
    batches = [texts[i : i + 1000] for i in range(0, len(texts), 1000)]
    spec = parse_sensitive({"epsilon": 1.0, "detectors": list(BUILTIN_DETECTORS)})
    detectors = build_detectors(spec)
    found = [sensitive_spans(detectors, b) for b in batches]
    t_detect = best(lambda: [sensitive_spans(detectors, b) for b in batches], args.repeats)

    priv = Privatizer(PrivatizerConfig(epsilon=args.epsilon), seed=2**40 + 39)
    priv.privatize(texts[:64])  # load the model and the search index before the clock
    tokens = priv._tokens
    assert isinstance(tokens, HFTokens)

    def positions() -> int:
        n = 0
        for b, spans in zip(batches, found, strict=True):
            _, lengths, layout = tokens.encode_flat(b)
            assert layout.offsets is not None
            n += int(sensitive_mask(layout.offsets, lengths, spans, (layout.starts, layout.stops)).sum())
        return n

    n_sensitive = positions()
    t_map = best(positions, args.repeats)
    t_tok = best(lambda: [tokens.encode_flat(b) for b in batches], args.repeats)
    t_madlib = best(lambda: [priv.privatize(b, range(i * 1000, i * 1000 + len(b))) for i, b in enumerate(batches)], 1)
    n_spans = sum(int(s.rows.size) for s in found)
    print(
        f"MR: {len(texts)} rows, {sum(map(len, texts))} characters; {n_spans} spans, {n_sensitive} sensitive positions"
    )
    print(f"built-in detectors (7, union included): {t_detect:.3f} s")
    print(f"spans -> positions (tokenization with offsets included): {t_map:.3f} s (tokenization alone {t_tok:.3f} s)")
    print(f"madlib pass (epsilon={args.epsilon}, MiniLM, privatize in batches of 1000): {t_madlib:.3f} s")
    print(
        f"detectors / madlib = {t_detect / t_madlib:.2%}; (detectors + map - tokenization) / madlib = "
        f"{(t_detect + t_map - t_tok) / t_madlib:.2%}"
    )


if __name__ == "__main__":
    main()
