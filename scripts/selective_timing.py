"""The default detector set's time beside a madlib pass over all of MR, in one run (issue 54 "Done when").

All 10,662 MR rows as one in-memory ``Dataset``, MiniLM, madlib ε = 100, one seed; each figure is the wall time
of one ``privatize_dataset`` call (models loaded and warmed before the clocks start):

- ``madlib``: the uniform release, ``num_proc`` 1 and 2;
- ``default set``: ``sensitive={"epsilon": 1.0}`` (every rule, spaCy NER through ``nlp.pipe`` in batches of 256,
  ``name``, ``rare``), others at ε = 100, ``num_proc`` 1 and 2; the two outputs must be identical (row-keyed
  draws), which the script checks;
- each detector alone over MR in batches of 1,000 rows (``sensitive_spans``), in this process.

The machine is shared: ``os.getloadavg()`` is recorded before and after. Run:
``nice -n 10 python scripts/selective_timing.py --out results/selective`` (writes ``timing.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


MODEL = "sentence-transformers/all-MiniLM-L6-v2"
EPS, EPS_S, SEED = 100.0, 1.0, 2**40 + 5406


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, round(time.perf_counter() - t0, 1)


def _children() -> int | None:
    """Processes this one still has (num_proc workers left running), where psutil is installed."""
    try:
        import psutil
    except ImportError:
        return None
    return len(psutil.Process().children(recursive=True))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/selective")
    args = ap.parse_args(argv)

    from datasets import Dataset

    from hf_textdp import Privatizer, PrivatizerConfig, privatize_dataset
    from hf_textdp.evaluation.tasks import load_task
    from hf_textdp.sensitive import build_detectors, parse_sensitive, sensitive_spans

    texts = [t for split in load_task("mr").texts.values() for t in split]
    ds = Dataset.from_dict({"text": texts})
    load_before = [round(x, 2) for x in os.getloadavg()]
    uniform = PrivatizerConfig(model=MODEL, mechanism="madlib", epsilon=EPS)
    selective = PrivatizerConfig(model=MODEL, mechanism="madlib", epsilon=EPS, sensitive={"epsilon": EPS_S})
    dets = build_detectors(parse_sensitive({"epsilon": EPS_S}))
    sensitive_spans(dets, texts[:10])  # load spaCy's pipeline and the lists outside the clocks
    Privatizer(selective, seed=SEED).privatize(texts[:10])  # the model, from disk into the page cache
    runs = {}
    outputs = {}
    for name, cfg in (("madlib", uniform), ("default_set", selective)):
        for proc in (1, 2):
            out, secs = _timed(lambda c=cfg, p=proc: privatize_dataset(ds, c, seed=SEED, num_proc=p))
            runs[f"{name}_num_proc_{proc}_s"] = secs
            runs[f"{name}_num_proc_{proc}_children_left"] = _children()
            outputs[(name, proc)] = out["input_ids"]
            print(f"{name} num_proc={proc}: {secs} s", file=sys.stderr)
    same = outputs[("default_set", 1)] == outputs[("default_set", 2)]
    per = {}
    for d in dets:
        _, per[d.name] = _timed(
            lambda d=d: [sensitive_spans([d], texts[i : i + 1000]) for i in range(0, len(texts), 1000)]
        )
    result = {
        "command": "nice -n 10 python scripts/selective_timing.py " + " ".join(argv or sys.argv[1:]),
        "rows": len(texts),
        "model": MODEL,
        **runs,
        "default_set_num_proc_1_equals_2": same,
        "madlib_num_proc_1_equals_2": outputs[("madlib", 1)] == outputs[("madlib", 2)],
        "detection_alone_s": per,
        "detection_alone_total_s": round(sum(per.values()), 1),
        "loadavg_before": load_before,
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "timing.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
