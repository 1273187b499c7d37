"""Words in a script foreign to the text, before and after the model-language default (issue 42 item 4).

Usage: python scripts/foreign_scripts.py [--mr ../shared/data/senteval/mr.jsonl] [--rows N]
Privatizes MR with the default model, once with every script (``candidates={"scripts": ["all"]}``, the
default before) and once with the defaults (the scripts of the model card's ``language: en``), for madlib
at ε = 100 (the README's quick start) and tem and santext at ε = 15 (the README's attack and tables), and
prints per run the output words that
- hold a letter of a script other than those of the input text's letters (Unicode ``Script`` property;
  Common and Inherited characters are neutral), and
- fail the candidate filter's test for those scripts (``script_ok``: also counts non-ASCII symbols such as
  ``∩`` or ``₹``, and phonetic or compatibility letters; docs/mechanisms/space.md §6.3).
"""

from __future__ import annotations

import argparse
import json
import time

import regex

from hf_textdp import Privatizer, PrivatizerConfig
from hf_textdp.candidates import SCRIPTS, script_ok


RUNS = (("madlib", 100.0), ("tem", 15.0), ("santext", 15.0))
_LETTER = regex.compile(r"\p{L}")


def letter_scripts(text: str) -> set[str]:
    """The scripts (of :data:`SCRIPTS`, else ``"other"``) of the letters of ``text``."""
    found = set()
    for ch in _LETTER.findall(text):
        name = next((s for s in SCRIPTS if regex.match(rf"\p{{Script={s.capitalize()}}}", ch)), "other")
        found.add(name)
    return found


def count(texts: list[str], scripts: set[str]) -> tuple[int, int, int, list[str]]:
    """(words, words with a letter of a foreign script, words failing script_ok, a few examples)."""
    words = foreign = failing = 0
    examples: list[str] = []
    for text in texts:
        for word in text.split():
            words += 1
            if letter_scripts(word) - scripts:
                foreign += 1
                if len(examples) < 8:
                    examples.append(word)
            if not script_ok(word, sorted(scripts)):
                failing += 1
    return words, foreign, failing, examples


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mr", default="../shared/data/senteval/mr.jsonl")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--seed", type=int, default=20261122)
    args = ap.parse_args()
    texts = [json.loads(line)["text"] for line in open(args.mr, encoding="utf-8")][: args.rows]
    scripts = letter_scripts(" ".join(texts))
    words, foreign, failing, _ = count(texts, scripts)
    print(f"{len(texts)} rows; scripts of the input's letters: {sorted(scripts)}")
    print(f"input: {words} words, {foreign} with a foreign-script letter, {failing} failing script_ok")
    print("| mechanism | ε | candidates | words | foreign-script letter | failing script_ok | seconds | examples |")
    print("|---|---|---|---|---|---|---|---|")
    for mechanism, epsilon in RUNS:
        for label, candidates in (
            ("all scripts (before)", {"set": "no_reserved", "scripts": ["all"]}),
            ("default", None),
        ):
            kwargs = {} if candidates is None else {"candidates": candidates}
            priv = Privatizer(
                PrivatizerConfig(mechanism=mechanism, epsilon=epsilon, **kwargs), seed=args.seed, allow_weak_seed=True
            )  # public benchmark data
            t = time.perf_counter()
            out = priv.privatize(texts)
            seconds = time.perf_counter() - t
            words, foreign, failing, examples = count(out, scripts)
            used = priv.privacy_report()["candidate_set"]
            note = f"{label}: scripts {used.get('scripts')}"
            print(
                f"| {mechanism} | {epsilon:g} | {note} | {words} | {foreign} ({100 * foreign / words:.2f} %) | "
                f"{failing} ({100 * failing / words:.2f} %) | {seconds:.0f} | {' '.join(examples)} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
