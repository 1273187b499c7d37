"""Reliability, third pass (issue 37): nothing this package did not write is deleted or overwritten, a
report describes only its own output, resume's seed check cannot pass by chance, errors carry no text."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from hf_textdp import PrivatizerConfig, privatize_dataset
from hf_textdp.errors import OutputExistsError
from hf_textdp.io.paths import work_dir_for
from tests.utils import CLI, error_lines, small_jsonl


pytestmark = pytest.mark.usefixtures("isolated_datasets_cache")
SEED = 2**40 + 1
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


# ---------------------------------------------------------------- 1. the work folder and --overwrite
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_symlink_at_the_work_folder_is_refused_and_its_target_kept(overwrite, tiny_bert, tmp_path):
    src = small_jsonl(tmp_path)
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "chapter1.tex").write_text("mine\n")
    output = tmp_path / "out.jsonl"
    work_dir_for(output).symlink_to(thesis, target_is_directory=True)
    with pytest.raises(OutputExistsError, match=r"\.out\.jsonl\.partial' is a symbolic link; it is not an hf-textdp"):
        privatize_dataset(
            str(src),
            PrivatizerConfig(epsilon=100.0, model=tiny_bert),
            seed=SEED,
            output_dir=output,
            shard_size=5,
            overwrite=overwrite,
        )
    assert sorted(p.name for p in thesis.iterdir()) == ["chapter1.tex"] and not output.exists()


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_foreign_folder_at_the_work_folder_is_refused_and_kept(overwrite, tiny_bert, tmp_path):
    src = small_jsonl(tmp_path)
    output = tmp_path / "out.jsonl"
    work = work_dir_for(output)
    work.mkdir()
    (work / "notes.txt").write_text("mine\n")
    with pytest.raises(
        OutputExistsError, match=r"the folder '.*\.out\.jsonl\.partial' exists; it is not an hf-textdp"
    ):
        privatize_dataset(
            str(src),
            PrivatizerConfig(epsilon=100.0, model=tiny_bert),
            seed=SEED,
            output_dir=output,
            shard_size=5,
            overwrite=overwrite,
        )
    assert sorted(p.name for p in work.iterdir()) == ["notes.txt"]


def test_cleanup_deletes_only_what_a_run_wrote(tmp_path):
    from hf_textdp.io.workdir import remove_own_files

    work = tmp_path / ".o.jsonl.partial"
    (work / "split-000").mkdir(parents=True)
    for name in ("lock", "manifest.json", "split-000/shard-00000.arrow", "split-000/progress.json", "theirs.txt"):
        (work / name).write_text("x")
    (work / "split-000" / "theirs.txt").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    os.symlink(outside, work / ".planted.tmp")  # a link with a temporary's name: unlinked, never followed
    assert remove_own_files(work) == ["split-000/theirs.txt", "theirs.txt"]
    assert sorted(str(p.relative_to(work)) for p in work.rglob("*")) == [
        "split-000",
        "split-000/theirs.txt",
        "theirs.txt",
    ]
    assert (outside / "keep").is_file()


def test_overwrite_refuses_an_output_folder_holding_foreign_files(tiny_bert, tmp_path):
    src = small_jsonl(tmp_path)
    cfg = PrivatizerConfig(epsilon=100.0, model=tiny_bert)
    output = tmp_path / "out"
    privatize_dataset(str(src), cfg, seed=SEED, output_dir=output)
    (output / "my_notes.txt").write_text("mine\n")
    with pytest.raises(OutputExistsError, match=r"holding files no hf-textdp output holds \('my_notes.txt'\)"):
        privatize_dataset(str(src), cfg, seed=SEED, output_dir=output, overwrite=True)
    assert (output / "my_notes.txt").read_text() == "mine\n"
    (output / "my_notes.txt").unlink()
    privatize_dataset(str(src), cfg, seed=SEED, output_dir=output, overwrite=True)  # its own output: replaced


# ---------------------------------------------------------------- 2. a report is bound to its output
def test_report_card_and_push_refuse_an_output_changed_after_privatizing(tiny_bert, tmp_path):
    import subprocess

    from hf_textdp import privacy_report
    from hf_textdp.errors import OutputChangedError
    from hf_textdp.integrations.cards import render_card
    from hf_textdp.integrations.hub import push_to_hub

    src = small_jsonl(tmp_path)
    cfg = PrivatizerConfig(epsilon=100.0, model=tiny_bert)
    output = tmp_path / "private.jsonl"
    privatize_dataset(str(src), cfg, seed=SEED, output_dir=output)
    assert privacy_report(output)["guarantee"] == "metric_dp"  # its own output: described
    output.write_bytes(src.read_bytes())  # the README's attack block did this: raw text under the same name
    for call in (privacy_report, render_card, lambda p: push_to_hub(p, "me/x", api=object())):
        with pytest.raises(OutputChangedError, match=r"this file changed after it was privatized"):
            call(output)
    res = subprocess.run([*CLI, "report", str(output)], capture_output=True, text=True, env=ENV)
    expected = (
        f"hf-textdp: error: output {str(output)!r}: this file changed after it was privatized (its content "
        "differs from the SHA-256 its privacy report records), so the report does not describe it."
    )
    assert res.returncode == 2 and res.stdout == "" and error_lines(res.stderr) == [expected]
    folder = tmp_path / "private"
    privatize_dataset(str(src), cfg, seed=SEED, output_dir=folder)
    render_card(folder)
    (folder / "privatizer_config.json").write_text("{}")  # a file no output holds may be added beside the data
    render_card(folder)
    data = next(folder.glob("data-*.arrow"))
    data.write_bytes(data.read_bytes()[:-8])
    with pytest.raises(OutputChangedError, match=r"this folder changed after it was privatized"):
        privacy_report(folder)


# ---------------------------------------------------------------- 4. errors never carry the text
CANARY = "zqxcanary9003 secret"


@pytest.mark.parametrize(
    ("name", "content", "streaming", "message"),
    [
        (
            "x.json",
            f'[{{"text": "{CANARY}"}}, {{"text": 5}}]',
            False,
            "column 'text' holds a number at row 1 and a string at row 0",
        ),
        (
            "x.jsonl",
            f'{{"text": 5}}\n{{"text": "{CANARY}"}}\n',
            False,
            "column 'text' holds a string at line 2 and a number at line 1",
        ),
        *[
            (
                "x.jsonl",
                f'{{"text": "ok"}}\n{{"text": "{CANARY}", broken\n',
                s,
                "line 2, column 34: not valid JSON (Expecting property name enclosed in double quotes)",
            )
            for s in (False, True)
        ],
        *[
            ("x.csv", f"text,label\nfine,1\n{CANARY},2,extra\n", s, "line 3 has 3 field(s) and the header line 2")
            for s in (False, True)
        ],
    ],
)
def test_unreadable_input_names_the_line_and_column_never_the_text(name, content, streaming, message, tmp_path):
    from hf_textdp.errors import InputFileError
    from hf_textdp.io.sources import load_source

    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(InputFileError) as info:
        load_source(str(path), streaming=streaming)
    assert str(info.value) == f"input file {str(path)!r} cannot be read as {name.split('.')[1]}: {message}."
    assert "zqxcanary" not in str(info.value)


def test_the_cli_catch_all_prints_no_library_message(monkeypatch, capsys):
    from hf_textdp import cli
    from hf_textdp.cli.report import ReportCommand

    def boom(args):
        raise RuntimeError(f"Could not convert '{CANARY}' with type str")

    monkeypatch.setattr(ReportCommand, "run", staticmethod(boom))
    assert cli.main(["report", "x"]) == 1
    assert capsys.readouterr().err == (
        "hf-textdp: error: unexpected RuntimeError; its message is not shown, as it may quote the data (rerun with "
        "--debug to see it)\n"
    )


def test_a_privatizer_called_with_a_list_never_lists_its_texts(tiny_bert):
    from hf_textdp import Privatizer
    from hf_textdp.errors import ParameterTypeError

    with pytest.raises(ParameterTypeError) as info:
        Privatizer(PrivatizerConfig(epsilon=100.0, model=tiny_bert), seed=SEED)([CANARY], [0])
    assert "zqxcanary" not in str(info.value) and "got list; for a list of texts use priv.privatize" in str(info.value)


def test_a_seed_file_that_is_not_text_is_named_without_its_bytes(tmp_path):
    import subprocess

    seed = tmp_path / "s.seed"
    seed.write_bytes(b"\xff\xfe\x9b1234\n")
    src = small_jsonl(tmp_path)
    res = subprocess.run(
        [*CLI, "privatize", str(src), str(tmp_path / "o.jsonl"), "--epsilon", "100", "--seed-file", str(seed)],
        capture_output=True,
        text=True,
        env=ENV,
    )
    assert res.returncode == 2
    assert error_lines(res.stderr) == ["hf-textdp: error: --seed-file must hold one integer (decimal or 0x hex)."]


def test_a_missing_path_that_looks_like_a_file_never_asks_the_hub(tmp_path, monkeypatch):
    import datasets

    from hf_textdp.errors import InputFileError
    from hf_textdp.io.sources import load_source

    def no_hub(*args, **kwargs):
        raise AssertionError("the Hub was asked")

    monkeypatch.setattr(datasets, "load_dataset", no_hub)
    for missing in (str(tmp_path / "typo.jsonl"), "data/typo.csv", "./corpus", "a/b/c"):
        with pytest.raises(
            InputFileError, match=rf"^input file '{missing}' does not exist \(no such file or folder\)"
        ):
            load_source(missing)


class TransportError(Exception):  # httpx2's hierarchy, which huggingface_hub 2 raises (not httpx's)
    pass


class ConnectError(TransportError):
    pass


@pytest.mark.parametrize("kind", ["httpx", "httpx2"])
def test_push_offline_says_the_hub_could_not_be_reached(kind, tmp_path):
    import httpx

    from hf_textdp.errors import HubUnreachableError
    from hf_textdp.integrations.hub import push_to_hub

    error = httpx.ConnectError if kind == "httpx" else ConnectError

    class Offline:
        def create_repo(self, *args, **kwargs):
            raise error("[Errno -2] Name or service not known")

    with pytest.raises(HubUnreachableError) as info:
        push_to_hub(_config_folder(tmp_path), "me/x", api=Offline())
    assert str(info.value) == (
        "could not reach the Hugging Face Hub (ConnectError: [Errno -2] Name or service not known); check your "
        "connection."
    )


def _config_folder(tmp_path: Path) -> Path:
    cfg = PrivatizerConfig(epsilon=100.0, model="line.txt")
    cfg.save_pretrained(tmp_path / "cfg")
    return tmp_path / "cfg"


# ---------------------------------------------------------------- 5. recipe folders stay inside --output
RECIPES = Path(__file__).resolve().parents[2] / "recipes"


@pytest.mark.parametrize(
    ("recipe", "key", "value"),
    [
        ("quick.yaml", "results_folder", "../../elsewhere"),
        ("quick.yaml", "name", ".."),
        ("finetune_trec.yaml", "results_folder", "/tmp/elsewhere"),
        ("attacks_mr.yaml", "results_folder", "../elsewhere"),
        ("attacks_mr.yaml", "name", ".."),
    ],
)
def test_a_recipe_cannot_write_outside_output(recipe, key, value, tmp_path):
    import yaml

    from hf_textdp.errors import InvalidParameterError
    from hf_textdp.evaluation.attacks.recipe import run_attack_recipe
    from hf_textdp.evaluation.recipe import run_recipe_file

    raw = yaml.safe_load((RECIPES / recipe).read_text())
    raw.pop("results_folder", None)
    raw[key] = value
    path = tmp_path / "recipes" / recipe
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(raw))
    out = tmp_path / "a" / "b" / "out"
    run = run_attack_recipe if recipe.startswith("attacks") else run_recipe_file
    # refused by the recipe schema (or, for a name the schema lets through, by io/paths.py), before any write
    where = rf"\b{key}\b\W+'{re.escape(value)}'\W+must name a folder inside --output"
    with pytest.raises(InvalidParameterError, match=where):
        run(path, out)
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(["recipes", recipe])


# ---------------------------------------------------------------- 6. user-named files: refused, atomic, links
def _saved_output(tmp_path: Path) -> Path:
    import json

    from tests.utils import bound_report

    out = tmp_path / "private.jsonl"
    out.write_text('{"text": "a b c", "dp_tokens": 3}\n')
    report = {"guarantee": "metric_dp", "mechanism": "madlib", "epsilon": 100.0, "certified": True}
    report["totals"] = {"rows": 1, "dp_tokens": 3, "max_row_dp_tokens": 3}  # a report agrees with its rows
    out.with_name(out.name + ".privacy_report.json").write_text(json.dumps(bound_report(out, report)))
    return out


def test_card_output_replaces_a_link_never_its_target(tmp_path, capsys):
    from hf_textdp.cli import main

    out = _saved_output(tmp_path)
    target = tmp_path / "thesis.md"
    target.write_text("mine\n")
    link = tmp_path / "card.md"
    link.symlink_to(target)
    assert main(["card", str(out), "--output", str(link)]) == 2
    assert (
        capsys.readouterr().err
        == f"hf-textdp: error: --output {str(link)!r} already exists; pass --overwrite to replace it.\n"
    )
    assert main(["card", str(out), "--output", str(link), "--overwrite"]) == 0
    assert target.read_text() == "mine\n" and not link.is_symlink() and "metric" in link.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [out.name, out.name + ".privacy_report.json", "thesis.md", "card.md"]
    )


@pytest.mark.parametrize("command", [["attack", "--private", "p.jsonl", "--public", "q.jsonl"], ["bench"]])
def test_attack_and_bench_refuse_an_existing_file_before_running(command, tmp_path, capsys, monkeypatch):
    from hf_textdp.cli import main

    monkeypatch.chdir(tmp_path)
    existing = tmp_path / "mine.json"
    existing.write_text("mine\n")
    flag = "--json" if command == ["bench"] else "--output"
    assert main([*command, flag, str(existing)]) == 2
    assert (
        capsys.readouterr().err
        == f"hf-textdp: error: {flag} {str(existing)!r} already exists; pass --overwrite to replace it.\n"
    )
    assert existing.read_text() == "mine\n"


# ---------------------------------------------------------------- 8. silent acceptance: an overflowing epsilon
@pytest.mark.parametrize("mechanism", ["madlib", "mahalanobis", "santext"])  # ε_tok = ε·diam (+ ...)
def test_an_epsilon_whose_token_bound_overflows_is_refused(mechanism, tmp_path):
    import math
    import re

    import numpy as np

    from hf_textdp import Privatizer
    from hf_textdp.errors import InvalidParameterError
    from tests.utils import write_vectors

    vec = write_vectors(tmp_path / "v.txt", ["a", "b", "c"], np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 5.0]]))
    priv = Privatizer(PrivatizerConfig(mechanism=mechanism, epsilon=1e308, model=str(vec)), seed=SEED)
    with pytest.raises(
        InvalidParameterError, match=r"^epsilon=1e\+308 is too large: the release would carry no"
    ) as info:
        priv.privacy_report()
    assert "its per-token bound epsilon_token overflows to infinity" in str(info.value)
    largest = float(re.search(r"is not the identity here is ([0-9.e+]+)\.$", str(info.value))[1])
    ok = Privatizer(PrivatizerConfig(mechanism=mechanism, epsilon=largest, model=str(vec)), seed=SEED)
    assert math.isfinite(ok.engine.claim.epsilon_token)  # refused otherwise
    assert ok.privacy_report()["certified"] is True
    over = Privatizer(PrivatizerConfig(mechanism=mechanism, epsilon=largest * (1 + 1e-9), model=str(vec)), seed=SEED)
    with pytest.raises(InvalidParameterError, match="is too large"):
        over.privacy_report()


# ---------------------------------------------------------------- 7. rows of any length
@pytest.mark.parametrize(
    ("mechanism", "postprocess"),
    [("madlib", "nearest"), ("tem", "nearest"), ("santext", "nearest"), ("madlib", "vector")],
)
def test_a_long_row_released_in_chunks_gives_the_one_call_output(mechanism, postprocess, tiny_bert, monkeypatch):
    import hf_textdp.release as release_mod
    from hf_textdp import Privatizer
    from tests.utils import corpus

    texts = [" ".join(corpus(40, seed=3)), "short row", " ".join(corpus(7, seed=4))]
    cfg = PrivatizerConfig(mechanism=mechanism, epsilon=20.0, model=tiny_bert, postprocess=postprocess)
    whole = Privatizer(cfg, seed=SEED)({"text": texts}, [0, 1, 2])
    assert max(whole["dp_tokens"]) > 300
    calls = []
    real = release_mod.ReleaseEngine._release_class
    monkeypatch.setattr(
        release_mod.ReleaseEngine, "_release_class", staticmethod(lambda *a: calls.append(len(a[1])) or real(*a))
    )
    monkeypatch.setattr(release_mod, "RELEASE_CHUNK", 37)
    chunked = Privatizer(cfg, seed=SEED)({"text": texts}, [0, 1, 2])
    assert max(calls) <= 37 and len(calls) > 8  # no mechanism call saw more than a chunk
    assert chunked == whole


def test_a_json_lines_row_longer_than_pyarrows_block_is_read(tmp_path):
    """pyarrow parses JSON in 1 MB blocks and refused a longer line ("straddling object"); the block now fits
    the longest line."""
    import json

    from hf_textdp.io.sources import load_source

    long_text = "word " * 600_000  # 3 MB
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"text": "short"}) + "\n" + json.dumps({"text": long_text}) + "\n")
    ds = load_source(str(path))
    assert ds["text"] == ["short", long_text]
