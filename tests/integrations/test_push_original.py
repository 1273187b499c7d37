"""push_to_hub refuses ``*_original`` columns unless allowed, and then the card says "not private" (issue 18).

The Hub is a local stand-in: ``HfApi.create_repo`` / ``upload_folder`` copy into a temporary folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hf_textdp import PrivatizerConfig, privatize_dataset
from hf_textdp.errors import HfTextDPError, OriginalTextError, ParameterTypeError
from hf_textdp.integrations.cards import original_columns, render_card
from hf_textdp.integrations.hub import push_to_hub
from tests.utils import bound_report


REPORT = {
    "report_version": 1,
    "hf_textdp_version": "0.1.0",
    "mechanism": "madlib",
    "epsilon": 80.0,
    "epsilon_token": 80.0,
    "delta": None,
    "guarantee": "metric_dp",
    "certified": True,
    "postprocess": "nearest",
    "totals": {"rows": 2, "dp_tokens": 6, "max_row_dp_tokens": 3, "max_row_dp_epsilon": 240.0},
    "not_covered": ["the length of each text"],
}
ROWS = [
    {"text": "private one", "text_original": "secret canary one", "dp_tokens": 3, "dp_epsilon": 240.0},
    {"text": "private two", "text_original": "secret canary two", "dp_tokens": 3, "dp_epsilon": 240.0},
]


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    from huggingface_hub import HfApi

    root = tmp_path / "hub"
    calls: list[str] = []

    def create_repo(self, repo_id, *, repo_type=None, private=None, exist_ok=False, **kwargs):
        (root / (repo_type or "model") / repo_id).mkdir(parents=True, exist_ok=True)
        calls.append("create_repo")
        return f"https://huggingface.co/{'datasets/' if repo_type == 'dataset' else ''}{repo_id}"

    def upload_folder(self, *, repo_id, folder_path, repo_type=None, commit_message=None, **kwargs):
        shutil.copytree(folder_path, root / (repo_type or "model") / repo_id, dirs_exist_ok=True)
        calls.append("upload_folder")

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    return root, calls


def _with_report(path: Path, rows: int = 2) -> Path:
    """``REPORT`` bound to ``path``, with the totals of its ``rows`` rows (a report must agree with its rows)."""
    report = path / "privacy_report.json" if path.is_dir() else path.with_name(path.name + ".privacy_report.json")
    totals = REPORT["totals"] | {"rows": rows, "dp_tokens": 3 * rows}
    report.write_text(json.dumps(bound_report(path, REPORT | {"totals": totals})))
    return path


def _jsonl(tmp_path: Path, rows=ROWS) -> Path:
    out = tmp_path / "out.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return _with_report(out)


def _csv(tmp_path: Path) -> Path:
    import pandas as pd

    out = tmp_path / "out.csv"
    pd.DataFrame(ROWS).to_csv(out, index=False)
    return _with_report(out)


def _parquet(tmp_path: Path) -> Path:
    import pandas as pd

    out = tmp_path / "out.parquet"
    pd.DataFrame(ROWS).to_parquet(out)
    return _with_report(out)


def _folder(tmp_path: Path) -> Path:
    from datasets import Dataset

    out = tmp_path / "saved"
    Dataset.from_list(ROWS).save_to_disk(str(out))
    return _with_report(out)


def _dict_folder(tmp_path: Path) -> Path:
    from datasets import Dataset, DatasetDict

    out = tmp_path / "saved_dict"
    DatasetDict({"train": Dataset.from_list(ROWS), "test": Dataset.from_list(ROWS)}).save_to_disk(str(out))
    return _with_report(out, rows=4)


FORMATS = [_jsonl, _csv, _parquet, _folder, _dict_folder]
FORMAT_IDS = ["jsonl", "csv", "parquet", "save_to_disk", "datasetdict"]


@pytest.mark.parametrize("make", FORMATS, ids=FORMAT_IDS)
def test_original_columns_found_in_every_output_format(tmp_path, make):
    assert original_columns(make(tmp_path)) == ["text_original"]


@pytest.mark.parametrize("make", FORMATS, ids=FORMAT_IDS)
def test_push_refuses_original_columns_and_uploads_nothing(tmp_path, fake_hub, make):
    root, calls = fake_hub
    with pytest.raises(OriginalTextError, match=r"\['text_original'\].*NON-private.*allow_original=True"):
        push_to_hub(make(tmp_path), "me/leaky")
    assert calls == [] and not root.exists()


def test_refusal_names_no_text(tmp_path, fake_hub):
    with pytest.raises(OriginalTextError) as err:
        push_to_hub(_jsonl(tmp_path), "me/leaky")
    assert "canary" not in str(err.value)


@pytest.mark.parametrize("make", FORMATS, ids=FORMAT_IDS)
def test_push_with_allow_original_says_not_private(tmp_path, fake_hub, make):
    root, calls = fake_hub
    push_to_hub(make(tmp_path), "me/leaky", allow_original=True)
    assert calls == ["create_repo", "upload_folder"]
    card = (root / "dataset" / "me" / "leaky" / "README.md").read_text()
    head = " ".join(line.lstrip("> ") for line in card.split("## Privacy")[0].splitlines())
    assert "**This dataset is NOT private.**" in head and "`text_original`" in head
    assert "No privacy guarantee applies to this column" in head
    meta = card.split("---")[1]
    assert "not-private" in meta and "original_columns" in meta


def test_push_without_original_has_no_warning(tmp_path, fake_hub):
    root, _ = fake_hub
    rows = [{k: v for k, v in r.items() if k != "text_original"} for r in ROWS]
    push_to_hub(_jsonl(tmp_path, rows), "me/clean")
    card = (root / "dataset" / "me" / "clean" / "README.md").read_text()
    assert "NOT private" not in card and "not-private" not in card


def test_allow_original_must_be_bool(tmp_path, fake_hub):
    with pytest.raises(ParameterTypeError, match="allow_original must be True or False"):
        push_to_hub(_jsonl(tmp_path), "me/leaky", allow_original="yes")


def test_card_command_says_not_private(tmp_path):
    assert "**This dataset is NOT private.**" in str(render_card(_jsonl(tmp_path)))


def test_cli_push_refuses_then_allows(tmp_path, fake_hub, capsys):
    from hf_textdp.cli import main

    root, _ = fake_hub
    out = _jsonl(tmp_path)
    assert main(["push", str(out), "me/cli-leaky"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--allow-original" in err[0] and "text_original" in err[0]
    assert not root.exists()
    assert main(["push", str(out), "me/cli-leaky", "--allow-original"]) == 0
    assert "NOT private" in (root / "dataset" / "me" / "cli-leaky" / "README.md").read_text()


def test_keep_original_run_is_refused_end_to_end(tmp_path, fake_hub, line_vocab):
    """A real keep_original=True output (static vectors, ε = ∞ test mode) is refused by push_to_hub."""
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["the movie", "a film"]))
    out = tmp_path / "priv.jsonl"
    cfg = PrivatizerConfig(epsilon=float("inf"), model=line_vocab, keep_original=True, options={"test_mode": True})
    privatize_dataset(str(src), cfg, output_dir=str(out), seed=2**40 + 3)
    assert original_columns(out) == ["text_original"]
    with pytest.raises(HfTextDPError, match="allow_original"):
        push_to_hub(out, "me/run")


def test_uncertified_card_says_row_columns_are_null():
    from hf_textdp.integrations.cards import dataset_card

    text = str(dataset_card({**REPORT, "certified": False, "warnings": ["calibration='reference_code' ..."]}))
    assert "**Not certified.**" in text and "`dp_epsilon` and `dp_delta` are null" in text
    assert "**Not certified.**" not in str(dataset_card(REPORT))
