"""Rows: a bad row fails naming the row or the columns; hard unicode and long rows are privatized, never
dropped (issue 7)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from hf_textdp import Privatizer, PrivatizerConfig, privatize_dataset
from hf_textdp.cli import main
from hf_textdp.errors import ColumnNotFoundError, InvalidRowError
from hf_textdp.io.paths import report_path_for, work_dir_for
from hf_textdp.space import CANDIDATE
from tests.utils import corpus, error_lines, read_jsonl, write_jsonl


# each test gets its own datasets cache, so nothing leaks between tests or into ~/.cache
pytestmark = pytest.mark.usefixtures("isolated_datasets_cache")


CANARY_ROW = "zqvmxkwjplrtbn canary text"

# (id, columns, privatize kwargs, error type, message fragment)
ROW_CASES = [
    (
        "none-at-row-17",
        {"text": [CANARY_ROW] * 17 + [None] + [CANARY_ROW] * 3},
        {},
        InvalidRowError,
        r"^row 17: expected str in column 'text', got NoneType\.$",
    ),
    ("int-column", {"text": [1, 2, 3]}, {}, InvalidRowError, r"^row 0: expected str in column 'text', got int\.$"),
    ("float-column", {"text": [1.5, 2.5]}, {}, InvalidRowError, r"^row 0: expected str in column 'text', got float"),
    (
        "list-column",
        {"text": [["a", "b"], ["c"]]},
        {},
        InvalidRowError,
        r"^row 0: expected str in column 'text', got list\.$",
    ),
    ("struct-column", {"text": [{"a": "x"}, {"a": "y"}]}, {}, InvalidRowError, r"^row 0: .*got dict\.$"),
    ("bytes-column", {"text": [b"ab", b"cd"]}, {}, InvalidRowError, r"^row 0: .*got bytes\.$"),
    (
        "missing-column",
        {"body": ["a"], "label": [1]},
        {},
        ColumnNotFoundError,
        r"text_column='text' is not in the dataset. Current columns in the dataset: \['body', 'label'\]",
    ),
    (
        "misspelled-column",
        {"text": ["a"], "label": [1]},
        {"text_column": "Text"},
        ColumnNotFoundError,
        r"text_column='Text' is not in the dataset. Current columns in the dataset: \['text', 'label'\]",
    ),
    (
        "missing-id-column",
        {"text": ["a"]},
        {"id_column": "rid"},
        ColumnNotFoundError,
        r"id_column='rid' is not in the dataset. Current columns in the dataset: \['text'\]",
    ),
    (
        "negative-id",
        {"text": ["a", "b"], "rid": [3, -1]},
        {"id_column": "rid"},
        InvalidRowError,
        r"^row 1: id_column='rid' must hold ints in \[0, 2\*\*63\), got a negative int\.$",
    ),
    (  # in different shards and batches: the whole column is checked before any row is privatized
        "duplicate-id",
        {"text": list("abcdefg"), "rid": [0, 1, 2, 3, 4, 5, 2]},
        {"id_column": "rid", "batch_size": 4},
        InvalidRowError,
        r"^rows 2 and 6: id_column='rid' holds the id 2 twice; ids must be unique \(two rows with one id would "
        r"share their noise\)\.$",
    ),
]


@pytest.mark.parametrize(
    ("columns", "kwargs", "exc", "match"), [c[1:] for c in ROW_CASES], ids=[c[0] for c in ROW_CASES]
)
def test_bad_rows_name_the_row_or_the_columns(columns, kwargs, exc, match, tiny_bert, tmp_path):
    """Row errors name the row (its index in the split, across shards); no output and no work folder remain."""
    import datasets

    ds = datasets.Dataset.from_dict(columns)
    output = tmp_path / "out.parquet"
    with pytest.raises(exc, match=match) as info:
        privatize_dataset(
            ds,
            PrivatizerConfig(epsilon=1.0, model=tiny_bert),
            seed=2**40 + 1,
            output_dir=output,
            shard_size=5,
            **kwargs,
        )
    assert isinstance(info.value, ValueError)
    assert "zqvmxkwjplrtbn" not in str(info.value)  # never the text of any row
    assert not output.exists() and not report_path_for(output).exists()
    assert not work_dir_for(output).exists()  # a bad row fails again on resume: nothing kept
    with pytest.raises(exc, match=match):  # the same without an output (plain map)
        privatize_dataset(ds, PrivatizerConfig(epsilon=1.0, model=tiny_bert), seed=2**40 + 1, **kwargs)


def test_a_repeated_id_in_a_batch_is_refused(tiny_bert):
    """A Privatizer sees one batch (streaming, Ray): it refuses an id it sees twice there."""
    priv = Privatizer(PrivatizerConfig(epsilon=1.0, model=tiny_bert), seed=2**40 + 1, id_column="rid")
    assert len(priv({"text": ["a", "b"], "rid": [7, 8]})["text"]) == 2
    with pytest.raises(InvalidRowError, match=r"^row 0 of the batch and row 2 of the batch: id_column='rid' holds"):
        priv({"text": [CANARY_ROW, "b", "c"], "rid": [7, 8, 7]})
    with pytest.raises(InvalidRowError, match=r"^row 1300 and row 1302: id_column='rid' holds the id 7 twice"):
        priv({"text": [CANARY_ROW, "b", "c"], "rid": [7, 8, 7]}, [1300, 1301, 1302])  # a map's indices name rows
    with pytest.raises(InvalidRowError, match=r"^row 1301: id_column='rid' must hold ints in \[0, 2\*\*63\)"):
        priv({"text": ["a", "b"], "rid": [7, -8]}, [1300, 1301])


def test_bad_row_in_the_cli(tiny_bert, tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", ["fine"] * 17 + [None] + ["fine"])
    code = main(
        ["privatize", str(src), str(tmp_path / "o.jsonl"), "--epsilon", "1", "--model", tiny_bert, "--shard-size", "4"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert error_lines(err) == ["hf-textdp: error: row 17: expected str in column 'text', got NoneType."]


LONG_WORDS = 20_000
UNICODE_CASES = [
    ("empty", ""),
    ("whitespace-only", " \t\n \u3000 "),
    ("control-characters", "a\x00b\x07c\x1b[31m d\u200b\ufeff\r\ne\x7f"),
    ("emoji", "good 😀👍🏽 movie 👨\u200d👩\u200d👧 ok"),
    ("cjk", "好的电影 とても良い 좋은 영화"),
    ("right-to-left", "review שלום עולם مرحبا بالعالم end"),
    ("combining-marks", "cafe\u0301 n\u0303 a\u0308 Z\u0351\u0334a\u0352"),
    ("spelled-specials", "[CLS] [SEP] [PAD] [UNK] [MASK] <|endoftext|> <s> </s>"),
    ("unknown-word", "the zebra☃ was good"),
    ("line-separators", "one\u2028two\u2029three\x1cfour\x85five"),
    ("long-text", "long"),  # replaced by 20,000 words in the fixture
]


@pytest.fixture(scope="module")
def unicode_runs(tiny_bert, tiny_gpt2, tmp_path_factory):
    """Each model: one seeded run at ε = 3 (to .jsonl) and one at ε = ∞ (test mode), all cases as rows."""
    import datasets

    words = corpus(3000, seed=21)
    long_text = " ".join(" ".join(words).split()[:LONG_WORDS])
    assert len(long_text.split()) == LONG_WORDS
    texts = [long_text if name == "long-text" else text for name, text in UNICODE_CASES]
    ds = datasets.Dataset.from_dict({"text": texts, "case": [name for name, _ in UNICODE_CASES]})
    runs = {}
    for name, model in (("tiny_bert", tiny_bert), ("tiny_gpt2", tiny_gpt2)):
        out_dir = tmp_path_factory.mktemp(f"unicode_{name}")
        cfg = PrivatizerConfig(epsilon=3.0, model=model)
        out = privatize_dataset(ds, cfg, seed=2**40 + 5, output_dir=out_dir / "out.jsonl", shard_size=4)
        inf = privatize_dataset(
            ds, PrivatizerConfig(epsilon=math.inf, model=model, options={"test_mode": True}), seed=2**40 + 5
        )
        priv = Privatizer(cfg)
        runs[name] = {
            "texts": texts,
            "out": out,
            "inf": inf,
            "file": read_jsonl(out_dir / "out.jsonl"),
            "report": json.loads(report_path_for(out_dir / "out.jsonl").read_text()),
            "priv": priv,
        }
    return runs


@pytest.mark.parametrize("model", ["tiny_bert", "tiny_gpt2"])
@pytest.mark.parametrize("case", [name for name, _ in UNICODE_CASES])
def test_hard_rows_are_privatized_not_dropped(case, model, unicode_runs):
    run = unicode_runs[model]
    i = [name for name, _ in UNICODE_CASES].index(case)
    text, out, inf, file_rows = run["texts"][i], run["out"], run["inf"], run["file"]
    assert len(out) == len(inf) == len(file_rows) == len(UNICODE_CASES)  # nothing dropped, order kept
    assert file_rows[i]["text"] == out[i]["text"] and file_rows[i]["case"] == case  # the file holds what we return
    space = run["priv"].engine.space
    tok = space.tokenizer
    ids_in = tok(text, add_special_tokens=True, split_special_tokens=True)["input_ids"]
    ids_out = out[i]["input_ids"]
    assert isinstance(out[i]["text"], str)
    assert len(ids_out) == len(ids_in)  # one to one, never truncated
    cls, _ = space.classify(np.array(ids_in))
    assert out[i]["dp_tokens"] == int((cls == CANDIDATE).sum())
    kept_in = [j for j, c in zip(ids_in, cls, strict=True) if c != CANDIDATE]
    assert [o for o, c in zip(ids_out, cls, strict=True) if c != CANDIDATE] == kept_in  # specials, unknowns unchanged
    assert inf[i]["input_ids"] == ids_in  # ε = ∞ keeps every token
    byte_level = model == "tiny_gpt2"
    if byte_level:  # lossless tokenizer: ε = ∞ gives the text back exactly
        assert inf[i]["text"] == text
    if case == "empty":
        assert out[i]["text"] == "" and out[i]["dp_tokens"] == 0
    if case == "long-text":
        assert out[i]["dp_tokens"] >= LONG_WORDS
    if case == "spelled-specials":  # text that spells specials is text: only the template's specials are special
        n_template = len(tok("", add_special_tokens=True)["input_ids"])
        assert sum(j in set(tok.all_special_ids) for j in ids_in) == n_template
        assert out[i]["dp_tokens"] > 0
    if case == "unknown-word" and not byte_level:
        unk = tok.unk_token_id
        assert unk in ids_in and ids_out[ids_in.index(unk)] == unk  # the unknown token passes through
        assert "zebra" not in out[i]["text"] and "☃" not in out[i]["text"]  # the original word never reappears
        assert "[UNK]" in out[i]["text"]
    if not byte_level and case in ("emoji", "cjk", "right-to-left"):
        for ch in text:
            if not ch.isascii() and not ch.isspace():
                assert ch not in out[i]["text"]


def test_hard_rows_report_counts_passthrough(unicode_runs):
    report = unicode_runs["tiny_bert"]["report"]
    out = unicode_runs["tiny_bert"]["out"]
    assert report["totals"]["rows"] == len(UNICODE_CASES)
    assert report["totals"]["dp_tokens"] == sum(out["dp_tokens"])
    assert report["totals"]["passthrough_tokens"] > 0  # [UNK] positions are counted, not privatized
    assert unicode_runs["tiny_gpt2"]["report"]["totals"]["passthrough_tokens"] == 0  # byte level: no unknowns


def test_lone_surrogate_names_the_row(tiny_bert):
    """A Python str with a lone surrogate has no UTF-8 form: the row is named (the tokenizer said TypeError)."""
    priv = Privatizer(PrivatizerConfig(epsilon=5.0, model=tiny_bert), seed=2**40 + 11)
    with pytest.raises(
        InvalidRowError, match=r"row 1 of the batch: .* not valid Unicode \(a lone surrogate at character 1\)"
    ):
        priv.privatize(["ok", "a\ud800b"])
    assert priv.privatize(["ok"])[0]
