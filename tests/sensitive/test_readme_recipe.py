"""Issue 54's first reproduction: the README's selective recipe (``--sensitive-epsilon 1`` alone: the default
detector set, no spans) on 50 customer messages (CSV, column ``message``) with names, emails, phones and order
numbers removes the names, which the old four-detector recipe left in 26 of 39 messages.

Three batches of 50 messages, each with its own seed, templates and faker locales: ``tuning`` (seed 5403, the
batch the ``name`` detector's rules were set on), ``second`` (seed 5404: looked at once after those rules, and its
misses, 2 names and 5 name words at the span level, led to three changes of the rules: cue words for relatives,
uncommon words after a cue, a signature after a dash) and ``independent`` (seed 5405: written before those
changes, never used to set anything). Measured: no name survives whole in any batch; no name
word in ``tuning`` and ``second``; 2 in ``independent`` (``nurmi`` after the given name ``marjatta`` and ``aksu``
after ``sağcan``: surnames the census lists lack beside given names they lack too). ``tuning`` before the
``name`` detector: 2 names whole and 8 name words; ``second``: 4 and 10."""

from __future__ import annotations

import csv
import re

import numpy as np
import pytest


pytestmark = [pytest.mark.slow, pytest.mark.minilm]  # MiniLM, spaCy's pipeline, 50 rows

#: batch: (seed, faker locales, templates)
BATCHES = {
    "tuning": (
        5403,
        ("en_US", "en_GB", "de_DE", "es_ES", "fr_FR", "it_IT", "pl_PL", "nl_NL"),
        (
            "Hi, this is {name}. My order {order} has not arrived yet, please call me on {phone}.",
            "hello, {name} here - the parcel for order {order} came damaged. email me at {email}",
            "Dear support, I ({name}) was charged twice for {order}. My number is {phone}.",
            "{name} writing again about {order}: nobody answered my mail to {email}!",
            "can someone help? i'm {name} and i still wait for a refund of {order}. {phone}",
        ),
    ),
    "second": (
        5404,
        ("en_IE", "en_AU", "en_CA", "de_AT", "fr_CH", "es_MX", "pt_PT", "sv_SE", "nl_BE", "cs_CZ"),
        (
            "Good morning, my name is {name} and I need to change the delivery address for order {order}.",
            "Order {order} is still missing after two weeks. Regards, {name}",
            "{name} ({email}) asked for a callback on {phone} about order {order}.",
            "please cancel {order}, thank you. -- {name}",
            "my husband {name} placed order {order} last week, can you ring him on {phone}?",
            "Refund request for {order}. Sent from my phone by {name}",
            "To whom it may concern: {name}, customer since 2019, order {order}, tel {phone}.",
        ),
    ),
    "independent": (
        5405,
        ("en_NZ", "en_PH", "de_CH", "es_CO", "da_DK", "fi_FI", "ro_RO", "hr_HR", "tr_TR", "sk_SK", "no_NO"),
        (
            "Hey, it's {name}. The tracking for {order} hasn't moved since Monday.",
            "Could you ask {name} to call me back on {phone}? It's about {order}.",
            "{name} - {phone} - order {order} - item arrived broken",
            "Thanks for the quick reply! Best wishes, {name}",
            "I am writing on behalf of {name}, whose order {order} was lost.",
            "Account holder: {name}. Email on file: {email}.",
            "the delivery driver told {name} that order {order} was left with a neighbour",
        ),
    ),
}


def _messages(batch: str, n: int) -> list[dict[str, str]]:
    faker = pytest.importorskip("faker")
    seed, locales, templates = BATCHES[batch]
    fake = faker.Faker(list(locales))
    fake.seed_instance(seed)
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        loc = fake[fake.locales[int(rng.integers(len(fake.locales)))]]
        name = f"{loc.first_name()} {loc.last_name()}"
        name = name.lower() if rng.random() < 0.25 else name
        local = "".join(c for c in name.lower().replace(" ", ".") if c.isascii() and (c.isalnum() or c == "."))
        values = {
            "name": name,
            "order": f"#{int(rng.integers(10**6, 10**7))}",
            "phone": f"+44 7{int(rng.integers(10**8, 10**9))}",
            "email": f"{local}@example.com",
        }
        rows.append({"message": templates[i % len(templates)].format(**values), "name": name})
    return rows


SURVIVING_WORDS = {"tuning": 0, "second": 0, "independent": 2}


@pytest.mark.parametrize("batch", list(BATCHES))
def test_readme_recipe_removes_names_without_spans(batch, tmp_path, capsys):
    pytest.importorskip("spacy")
    from hf_textdp.cli import main
    from hf_textdp.io.models import load_space
    from hf_textdp.sensitive import best_english_ner

    if best_english_ner() is None:
        pytest.skip("no English spaCy pipeline with NER is installed (pip install 'hf-textdp[ner]')")
    rows = _messages(batch, 50)
    src = tmp_path / "messages.csv"
    with src.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["message"], *[[r["message"]] for r in rows]])
    seed = tmp_path / "seed"
    seed.write_text(str(2**40 + BATCHES[batch][0]), encoding="ascii")
    out = tmp_path / "private.csv"
    argv = ["privatize", str(src), str(out), "--text-column", "message", "--epsilon", "90"]
    assert main([*argv, "--sensitive-epsilon", "1", "--seed-file", str(seed)]) == 0
    printed = capsys.readouterr().out
    print(printed)
    head, *lines = printed.splitlines()
    assert "spacy:" in head and ", name, rare;" in head  # the detectors that ran
    # each class with its own ε (issue 54 item 5): ε_s for the sensitive positions, ε = 90 for the others alone
    assert [x for x in lines if "ε_s = 1 " in x and "sensitive positions" in x]
    at_90 = [x for x in lines if re.search(r"\bε = 90\b", x)]
    assert at_90 and all("other positions" in x and "sensitive" not in x for x in at_90)
    with out.open(newline="", encoding="utf-8") as f:
        released = [r["message"] for r in csv.DictReader(f)]
    norm = load_space("sentence-transformers/all-MiniLM-L6-v2").tokenizer.backend_tokenizer.normalizer.normalize_str
    whole = [r["name"] for r, text in zip(rows, released, strict=True) if norm(r["name"]) in norm(text)]
    words = re.compile(r"[^\W\d_]+")  # "tarantino." and "(rémy" count as the words they hold
    pairs = zip(rows, released, strict=True)
    parts = sum(w in set(words.findall(norm(text))) for r, text in pairs for w in words.findall(norm(r["name"])))
    print(f"names surviving whole: {len(whole)} of {len(rows)}; name words surviving: {parts}")
    assert whole == []
    assert parts <= SURVIVING_WORDS[batch]
