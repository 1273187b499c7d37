"""Issue 39's "Done when" on the generated identifier-bearing MR set with MiniLM: no injected email, phone or card
number survives selective privatization, every other token is unchanged with others='keep', the same for names
with the span column, and the CLI's --sensitive-* flags give the API's output."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from hf_textdp import PrivatizerConfig
from hf_textdp.privatizer import Privatizer


pytest.importorskip("faker")

from hf_textdp.evaluation.identifiers import identifier_set  # noqa: E402


pytestmark = pytest.mark.slow  # loads MiniLM and privatizes 200 rows

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
SEED = 2**40 + 3911
DETECTORS = ["email", "phone", "card", "number"]


@pytest.fixture(scope="module")
def rows(shared_dir):
    return identifier_set("mr", seed=3901, n=200, data_dir=str(shared_dir / "data" / "senteval"))


@pytest.fixture(scope="module")
def tokenizer():
    from hf_textdp.errors import HfTextDPError
    from hf_textdp.io.models import load_space

    try:
        return load_space(MODEL).tokenizer
    except HfTextDPError:
        pytest.skip(f"{MODEL} is not in the local cache")


def _survivors(rows, outs, kinds):
    found = total = 0
    for row, out in zip(rows, outs, strict=True):
        for (a, b), kind in zip(row["spans"], row["kinds"], strict=True):
            if kind in kinds:
                total += 1
                found += row["text"][a:b].lower() in out.lower()  # the model is uncased
    return found, total


def _unchanged_outside(tokenizer, rows, out_ids, inside):
    """Every position whose characters lie outside ``inside(row)`` (character intervals) kept its input id;
    returns the number of positions checked."""
    checked = 0
    for row, ids in zip(rows, out_ids, strict=True):
        enc = tokenizer(row["text"], return_offsets_mapping=True)
        assert len(enc["input_ids"]) == len(ids)
        spans = inside(row)
        for tok_in, tok_out, (a, b) in zip(enc["input_ids"], ids, enc["offset_mapping"], strict=True):
            if b > a and not any(a < e and s < b for s, e in spans):
                assert tok_out == tok_in
                checked += 1
    return checked


def test_detectors_keep_nothing_of_emails_phones_and_cards(rows, tokenizer):
    cfg = PrivatizerConfig(epsilon=50.0, sensitive={"epsilon": 1.0, "detectors": DETECTORS, "others": "keep"})
    priv = Privatizer(cfg, seed=SEED)
    out = priv({"text": [r["text"] for r in rows]}, list(range(len(rows))))
    found, total = _survivors(rows, out["text"], {"email", "phone", "card"})
    print(f"injected emails, phone and card numbers surviving: {found} of {total}")
    assert total > 100 and found == 0

    def digits_and_emails(row):  # an independent superset of what the four detectors select: words with a
        # digit or an "@" (every email, phone and card number, and every other digit run, holds one)
        return [(m.start(), m.end()) for m in re.finditer(r"\S+", row["text"]) if re.search(r"[0-9@]", m.group())]

    checked = _unchanged_outside(tokenizer, rows, out["input_ids"], digits_and_emails)
    assert checked > 3000
    assert out["dp_epsilon"] == [None] * len(rows)
    assert sum(out["dp_sensitive_tokens"]) == sum(out["dp_tokens"]) > 0


def test_span_column_keeps_nothing_of_the_names(rows, tokenizer):
    sens = {"epsilon": 1.0, "column": "spans", "detectors": [], "others": "keep"}
    cfg = PrivatizerConfig(epsilon=50.0, sensitive=sens)
    priv = Privatizer(cfg, seed=SEED)
    out = priv({"text": [r["text"] for r in rows], "spans": [r["spans"] for r in rows]}, list(range(len(rows))))
    found, total = _survivors(rows, out["text"], {"name", "email", "phone", "card", "city", "id"})
    names = _survivors(rows, out["text"], {"name"})
    print(f"injected identifiers surviving: {found} of {total}; names {names[0]} of {names[1]}")
    assert names[1] > 40 and found == 0
    checked = _unchanged_outside(tokenizer, rows, out["input_ids"], lambda row: row["spans"])
    assert checked > 3000


def test_cli_flags_give_the_api_output(rows, tmp_path, tokenizer, capsys):
    from hf_textdp.cli import main

    part = rows[:40]
    src = tmp_path / "ids.jsonl"
    src.write_text("".join(json.dumps({"text": r["text"], "spans": r["spans"]}) + "\n" for r in part), "utf-8")
    seed_file = tmp_path / "seed"
    seed_file.write_text(str(SEED), encoding="ascii")
    out_path = tmp_path / "out.jsonl"
    argv = ["privatize", str(src), str(out_path), "--epsilon", "50", "--seed-file", str(seed_file)]
    argv += ["--sensitive-epsilon", "1", "--sensitive-detectors", "email,phone,card", "--sensitive-column", "spans"]
    argv += ["--others", "privatize"]
    assert main(argv) == 0
    line = capsys.readouterr().out
    assert re.search(r"sensitive: \d+ tokens at epsilon_s=1 per token; others: \d+ tokens at epsilon=50 ", line)
    assert "detectors email, phone, card, span column 'spans'" in line and "0 passthrough; report: " in line
    cli = [json.loads(line) for line in out_path.read_text(encoding="utf-8").splitlines()]
    sens = {"epsilon": 1.0, "detectors": ["email", "phone", "card"], "column": "spans", "others": "privatize"}
    api = Privatizer(PrivatizerConfig(epsilon=50.0, sensitive=sens), seed=SEED)(
        {"text": [r["text"] for r in part], "spans": [r["spans"] for r in part]}, list(range(len(part)))
    )
    for key in ("text", "input_ids", "dp_tokens", "dp_sensitive_tokens"):
        assert [r[key] for r in cli] == api[key]
    np.testing.assert_allclose([r["dp_epsilon"] for r in cli], api["dp_epsilon"], rtol=1e-12)  # JSON keeps 14 digits
    assert sum(api["dp_sensitive_tokens"]) > 0
