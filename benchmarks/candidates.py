"""Candidate settings on SentEval MR (issue 17): what the emitted text looks like under each setting.

    HF_HUB_OFFLINE=1 python benchmarks/candidates.py [--rows 2000] [--out results/candidates]

For madlib (ε = 80), tem (ε = 15) and santext (ε = 10) on the default model, and each candidate setting
(``all`` with classes mixed, the old default; ``no_reserved`` mixed; ``no_reserved`` class-preserving, the
new default; that + ``scripts=["latin"]``), it
privatizes a strided subset of MR (MR is sorted by label: every k-th row keeps both labels) with a fixed
public benchmark seed and measures, over the privatized output:

- ``in_wordlist``: share of output words (maximal runs of Unicode letters, lower-cased) that occur in a
  public English word list, the vocabulary of the other SentEval tasks (CR, MPQA, SST-5, TREC);
- ``reserved``: share of privatized positions whose output token is a placeholder (``[unusedN]``, ...);
- ``foreign``: share of privatized positions whose output token holds a character outside ASCII, Latin-1
  Supplement, Latin Extended-A and General Punctuation (a fixed range, independent of the script filter
  of space.md §6.3), placeholders excluded;
- ``glued_split``: share of input words (a word-initial WordPiece token and the ``##`` pieces after it)
  in which some privatized position changed class: a continuation piece replaced by a word-initial token
  (the word is *split* in the output) or a word-initial token replaced by a ``##`` piece (*glued* to the
  word before). Measured on ids, so the decoder's spacing does not hide it.

Writes ``metrics.json``, ``metrics.md`` (the table) and ``samples.md`` (five rows per mechanism).
The original text is public benchmark data; this script is an evaluation, not a release.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import numpy as np

from hf_textdp import Privatizer, PrivatizerConfig
from hf_textdp.candidates import is_reserved, piece_text
from hf_textdp.space import CANDIDATE, STRUCTURAL


DATA = Path("/work/shared/data/senteval")
SEED = 0x5EED_CA4D_1DA7_E517  # public benchmark seed (the data are public)
MECHANISMS = [("madlib", 80.0), ("tem", 15.0), ("santext", 10.0)]
SETTINGS = [
    ("all, classes mixed (old default)", {"set": "all", "classes": "mix"}),
    ("no_reserved, classes mixed", {"set": "no_reserved", "classes": "mix"}),
    ("no_reserved, class-preserving (new default)", "no_reserved"),
    ("no_reserved + latin, class-preserving", {"set": "no_reserved", "scripts": ["latin"]}),
]
# Characters of ordinary English-language text, for the foreign measure (independent of the script filter):
# ASCII, Latin-1 Supplement, Latin Extended-A and General Punctuation.
PLAIN = re.compile(r"[\x00-\u017f\u2010-\u205e]*")
WORD = re.compile(r"[^\W\d_]+")


def read_texts(path: Path) -> list[str]:
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def word_list() -> set[str]:
    words: set[str] = set()
    for name in ("cr", "mpqa", "sst5.train", "sst5.dev", "sst5.test", "trec.train", "trec.test"):
        for t in read_texts(DATA / f"{name}.jsonl"):
            words.update(w.lower() for w in WORD.findall(t))
    return words


def measure(priv: Privatizer, texts: list[str], out: dict[str, list], words: set[str]) -> dict[str, float]:
    space = priv.engine.space
    tok = space.tokenizer
    n_words = n_in = 0
    n_pos = n_res = n_for = 0
    n_inwords = n_bad = 0
    for text, new_text, new_ids in zip(texts, out["text"], out["input_ids"], strict=True):
        old_ids = np.asarray(tok(text)["input_ids"])
        cls, _ = space.classify(old_ids)
        priv_pos = np.nonzero(cls == CANDIDATE)[0]
        old_t = tok.convert_ids_to_tokens(old_ids.tolist())
        new_t = tok.convert_ids_to_tokens(list(new_ids))
        for p in priv_pos:
            n_pos += 1
            t = new_t[p]
            if is_reserved(t):
                n_res += 1
            else:
                _, body = piece_text(t, "wordpiece", "##")
                n_for += PLAIN.fullmatch(body or "") is None
        # input words: a word-initial token and the ## pieces after it; structural tokens close a word
        bad: bool | None = None  # None: no word open
        for p, t in enumerate(old_t):
            cont = t.startswith("##")
            if cls[p] == STRUCTURAL or not cont:
                if bad is not None:
                    n_words += 1
                    n_bad += bad
                bad = None if cls[p] == STRUCTURAL else False
            if cls[p] == CANDIDATE and cont != new_t[p].startswith("##"):
                bad = True
        if bad is not None:
            n_words += 1
            n_bad += bad
        found = [w.lower() for w in WORD.findall(new_text)]
        n_in += len(found)
        n_inwords += sum(w in words for w in found)
    return {
        "in_wordlist": n_inwords / max(n_in, 1),
        "reserved": n_res / max(n_pos, 1),
        "foreign": n_for / max(n_pos, 1),
        "glued_split": n_bad / max(n_words, 1),
        "privatized_tokens": n_pos,
        "output_words": n_in,
        "input_words": n_words,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--out", default="results/candidates")
    ap.add_argument("--samples", type=int, default=5)
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    mr = read_texts(DATA / "mr.jsonl")
    idx = np.linspace(0, len(mr) - 1, args.rows).round().astype(int).tolist()  # strided: both labels
    texts = [mr[i] for i in idx]
    words = word_list()
    sample_rows = [int(i) for i in np.linspace(0, args.rows - 1, args.samples).round()]
    results, samples = [], {}
    for mech, eps in MECHANISMS:
        for label, cand in SETTINGS:
            t0 = time.perf_counter()
            priv = Privatizer(PrivatizerConfig(mechanism=mech, epsilon=eps, candidates=cand), seed=SEED)
            out: dict[str, list] = {"text": [], "input_ids": []}
            for s in range(0, len(texts), 250):
                part = priv({"text": texts[s : s + 250]}, idx[s : s + 250])
                out["text"] += part["text"]
                out["input_ids"] += part["input_ids"]
            row = {
                "mechanism": mech,
                "epsilon": eps,
                "setting": label,
                "candidates": priv.engine.space.V,
                "epsilon_token": priv.engine.claim.epsilon_token,
                "epsilon_token_per_class": {c["name"]: c["epsilon_token"] for c in priv.engine.class_report() or []},
                **measure(priv, texts, out, words),
                "seconds": round(time.perf_counter() - t0, 1),
            }
            print(json.dumps(row), flush=True)
            results.append(row)
            samples[(mech, label)] = [out["text"][i] for i in sample_rows]
    (out_dir / "metrics.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    head = (
        "| mechanism | ε | setting | |C| | ε_tok (per class) | in word list | reserved | foreign script "
        "| glued/split words |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        per = r["epsilon_token_per_class"]
        tok = f"{r['epsilon_token']:.2f}" + (" (" + " / ".join(f"{v:.2f}" for v in per.values()) + ")" if per else "")
        lines.append(
            f"| {r['mechanism']} | {r['epsilon']:g} | {r['setting']} | {r['candidates']} | {tok} | "
            f"{r['in_wordlist']:.1%} | {r['reserved']:.2%} | {r['foreign']:.2%} | {r['glued_split']:.1%} |"
        )
    (out_dir / "metrics.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    md = []
    for mech, eps in MECHANISMS:
        md.append(f"### {mech}, ε = {eps:g}\n")
        for k, i in enumerate(sample_rows):
            md.append(f"{k + 1}. original: {texts[i]}")
            for label, _ in SETTINGS:
                md.append(f"   - {label}: {samples[(mech, label)][k]}")
        md.append("")
    (out_dir / "samples.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
