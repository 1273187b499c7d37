"""The privacy report (accounting.md §4, §7): exact keys for every mechanism, known values, no seed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hf_textdp import Privatizer, PrivatizerConfig, privacy_report
from hf_textdp.integrations.report_text import format_report
from hf_textdp.mechanisms import list_mechanisms
from hf_textdp.rng import STREAM_VERSION
from tests.utils import write_vectors


REPORT_KEYS = {
    "report_version",
    "hf_textdp_version",
    "stream_version",
    "mechanism",
    "parameters",
    "postprocess",
    "postprocess_parameters",
    "metric",
    "epsilon",
    "delta",
    "delta_per_projection",
    "guarantee",
    "certified",
    "warnings",
    "epsilon_token",
    "delta_token",
    "details",
    "row_guarantee",
    "composition",
    "candidate_set",
    "model",
    "projection",
    "scale",
    "totals",
    "not_covered",
}
TOTALS_KEYS = {
    "rows",
    "dp_tokens",
    "special_tokens",
    "padding_tokens",
    "passthrough_tokens",
    "max_row_dp_tokens",
    "max_row_dp_epsilon",
    "max_row_dp_delta",
}
EXTRA_OPTIONS = {"santext_plus": {"frequencies": {"w0": 5, "w1": 1, "w2": 3}}}
WITH_DELTA = {"gaussian", "truncated_laplace"}


@pytest.fixture
def t5_vocab(tmp_path):
    E = np.array([[0, 0], [1, 0], [0, 1], [3, 0], [0, 4]], dtype=np.float32)
    return str(write_vectors(tmp_path / "t5.txt", [f"w{i}" for i in range(5)], E))


def test_a_report_of_no_rows_warns(t5_vocab, caplog):
    """A privatizer whose map was served from the cache (or ran in workers) counted nothing: say so."""
    import logging

    priv = Privatizer(PrivatizerConfig(epsilon=2.0, model=t5_vocab), seed=2**40 + 3)
    with caplog.at_level(logging.WARNING, logger="hf_textdp"):
        assert privacy_report(priv)["totals"]["rows"] == 0
        assert privacy_report(priv)["totals"]["rows"] == 0  # warned once, not on every call (issue 57 item 10)
        priv({"text": ["w0 w1"]}, [0])
        assert privacy_report(priv)["totals"]["rows"] == 1
    [record] = [r for r in caplog.records if "privatized no rows in this process" in r.getMessage()]
    assert "privacy_report(output_dir)" in record.getMessage()


# dp_mlm needs a masked LM, not a vector file: its report is checked in tests/mechanisms/test_dp_mlm.py
@pytest.mark.parametrize("mechanism", [m for m in list_mechanisms() if m != "dp_mlm"])
def test_report_has_exactly_the_spec_keys(mechanism, t5_vocab):
    cfg = PrivatizerConfig(mechanism=mechanism, epsilon=2.0, model=t5_vocab, options=EXTRA_OPTIONS.get(mechanism, {}))
    priv = Privatizer(cfg, seed=918273645, allow_weak_seed=True)
    out = priv({"text": ["w0 w1 w2 w3 w4", "w1 oov", ""]}, [0, 1, 2])
    report = privacy_report(priv)
    assert set(report) == REPORT_KEYS
    assert set(report["totals"]) == TOTALS_KEYS
    text = json.dumps(report, allow_nan=False)
    assert "918273645" not in text and format(918273645, "x") not in text
    assert report["mechanism"] == mechanism
    assert report["stream_version"] == STREAM_VERSION == 2  # keyed Philox streams (randomness.md)
    assert report["totals"]["rows"] == 3 and report["totals"]["passthrough_tokens"] == 1
    assert out["dp_tokens"] == [5, 1, 0]
    assert ("dp_delta" in out) == (mechanism in WITH_DELTA)
    if mechanism in WITH_DELTA:
        assert out["dp_delta"] == [5 * report["delta_token"], 1 * report["delta_token"], 0.0]
    eps_tok = report["epsilon_token"]
    if report["guarantee"] == "umldp":  # santext_plus, p < 1: unprotected tokens bound no row (accounting.md §2)
        assert out["dp_epsilon"] == [None, None, None] and report["totals"]["max_row_dp_epsilon"] is None
        assert "dp_epsilon null  row bound = none: the per-token numbers do not bound a row" in format_report(report)
    else:
        assert out["dp_epsilon"] == [5 * eps_tok, 1 * eps_tok, 0.0]
    assert report["not_covered"][:9] == privacy_report(priv)["not_covered"][:9]
    assert len(report["not_covered"]) >= 9


def test_report_known_answers_line_vocabulary(line_vocab):
    """accounting.md §4 known answers: line vocabulary sha256, ids sha256, median ρ₁ = 1, diam = 3; §2: 30.0."""
    priv = Privatizer(PrivatizerConfig(epsilon=2.0, model=line_vocab), seed=2**40 + 1)
    out = priv({"text": ["w0 w1 w2 w3 w0"]}, [0])
    report = priv.privacy_report()
    cs = report["candidate_set"]
    assert cs["sha256"] == "4c9c4f354e74153db012329d71c8562ec23e498148174b2c49de58f45d47cdbe"
    assert cs["ids_sha256"] == "a1e03200f1f82ad2c1cec8795c271aaecf98f5aa2d151d2229ec5fa0c177cf77"
    assert report["scale"]["median_rho1"] == 1.0 and report["scale"]["diam"] == 3.0
    assert out["dp_epsilon"] == [30.0]
    assert report["model"]["kind"] == "glove" and len(report["model"]["file_sha256"]) == 64


def test_report_known_answers_tiny_random_matrix(tiny_random_vocab):
    """accounting.md §4: sha256 5f74…, median ρ₁ 0.663519, diam 3.811709; ε = 2: 1.327039, 7.623418; row 38.117088."""
    priv = Privatizer(PrivatizerConfig(epsilon=2.0, model=tiny_random_vocab), seed=2**40 + 1)
    out = priv({"text": ["w0 w1 w2 w3 w4"]}, [0])
    r = priv.privacy_report()
    assert r["candidate_set"]["sha256"] == "5f74ef6ec2c639ff447cb52256353b79599321a956d6cf9921aa9599585cb836"
    assert r["scale"]["median_rho1"] == pytest.approx(0.663519, abs=5e-7)
    assert r["scale"]["diam"] == pytest.approx(3.811709, abs=5e-7)
    assert r["scale"]["epsilon_median_rho1"] == pytest.approx(1.327039, abs=5e-7)
    assert r["scale"]["epsilon_diam"] == pytest.approx(7.623418, abs=5e-7)
    assert out["dp_epsilon"][0] == pytest.approx(38.117088, abs=5e-6)


def test_privacy_report_of_a_saved_output(tmp_path, line_vocab):
    from hf_textdp import privatize_dataset

    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "w0 w1"}\n{"text": "w3"}\n')
    privatize_dataset(str(src), PrivatizerConfig(epsilon=1.0, model=line_vocab), output_dir=tmp_path / "out.jsonl")
    report = privacy_report(tmp_path / "out.jsonl")
    assert report["totals"]["rows"] == 2 and report["totals"]["dp_tokens"] == 3


def test_report_command_says_when_the_original_text_is_kept(tmp_path, line_vocab, capsys):
    from hf_textdp import privatize_dataset
    from hf_textdp.cli import main

    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "w0 w1"}\n{"text": "w3"}\n')
    for name, keep in (("plain.jsonl", False), ("kept.jsonl", True)):
        cfg = PrivatizerConfig(epsilon=1.0, model=line_vocab, keep_original=keep)
        privatize_dataset(str(src), cfg, output_dir=tmp_path / name)
        assert main(["report", str(tmp_path / name)]) == 0
        out = capsys.readouterr().out
        assert out.startswith("NOT PRIVATE: text_original holds the original input text") is keep
        assert "Privacy report for" in out


def test_cli_report_of_a_file_that_is_no_output(tmp_path, capsys):
    """``report FILE`` of an extension hf-textdp does not write says so (not 'looked for FILE/privacy_report.json')."""
    from hf_textdp.cli import main

    for name in ("my.seed", "notes"):
        (tmp_path / name).write_text("1234\n")
        assert main(["report", str(tmp_path / name)]) == 2
        assert capsys.readouterr().err == (
            f"hf-textdp: error: output {str(tmp_path / name)!r} is a file of no output format hf-textdp writes: give "
            "an output folder, or a .jsonl/.json/.csv/.parquet output file with its .privacy_report.json beside it.\n"
        )
