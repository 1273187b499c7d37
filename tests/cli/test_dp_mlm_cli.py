"""``hf-textdp privatize --mechanism dp_mlm`` and ``hf-textdp calibrate --mechanism dp_mlm --public`` (issue 44)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.mechanisms.mlm_models import build_tiny_bert_mlm
from tests.utils import CLI, corpus, read_jsonl, write_jsonl


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mlm(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_bert_mlm(tmp_path_factory.mktemp("cli_mlm")))


def _run(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_TEXTDP_CACHE": str(tmp / "cache"),
        "HF_DATASETS_CACHE": str(tmp / "ds_cache"),
        "PYTHONPATH": os.pathsep.join(p for p in ("/work/guard", str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
        "TOKENIZERS_PARALLELISM": "false",
    }
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=600)


def test_privatize_runs_with_the_report(mlm: str, tmp_path: Path) -> None:
    rows = corpus(8, 4460)
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    seed = tmp_path / "my.seed"
    seed.write_text(str(2**40 + 4461))
    res = _run(
        ["privatize", str(src), str(out), "--mechanism", "dp_mlm", "--model", mlm, "--epsilon", "2",
         "--seed-file", str(seed), "-o", "clip=[-1.0, 1.0]", "-o", "context=once"],
        tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    released = read_jsonl(out)
    assert len(released) == 8 and all(r["dp_epsilon"] == 2.0 * r["dp_tokens"] for r in released)
    report_file = next(p for p in tmp_path.iterdir() if p.name.startswith("out") and "report" in p.name)
    report = json.loads(report_file.read_text())
    assert (report["mechanism"], report["guarantee"], report["epsilon_token"]) == ("dp_mlm", "dp", 2.0)
    assert report["totals"]["dp_tokens"] == sum(r["dp_tokens"] for r in released) > 40
    assert report["parameters"]["context"] == "once"
    assert "dp_mlm" in res.stdout or "dp_mlm" in res.stderr


def test_calibrate_measures_bounds_on_public_text_only(mlm: str, tmp_path: Path) -> None:
    public = tmp_path / "public.txt"
    public.write_text("\n".join(corpus(40, 4470)) + "\n")
    res = _run(["calibrate", "--mechanism", "dp_mlm", "--model", mlm, "--public", str(public), "--json"], tmp_path)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    a, b = got["clip"]
    assert a < b and got["lines"] == 40 and got["tail"] == 1e-4 and got["clip_source"] == str(public)
    text = _run(["calibrate", "--mechanism", "dp_mlm", "--model", mlm, "--public", str(public)], tmp_path).stdout
    assert f"-o 'clip=[{a!r}, {b!r}]'" in text
    # no public text: refused (exit 2, one line)
    res = _run(["calibrate", "--mechanism", "dp_mlm", "--model", mlm], tmp_path)
    assert res.returncode == 2 and "--public" in res.stderr
    # the bounds' public file may not be the input being privatized
    src = write_jsonl(tmp_path / "private.jsonl", corpus(4, 4471))
    res = _run(
        ["privatize", str(src), str(tmp_path / "o.jsonl"), "--mechanism", "dp_mlm", "--model", mlm, "--epsilon", "1",
         "--seed", str(2**40 + 4472), "-o", f"clip=[{a!r}, {b!r}]", "-o", f"clip_source={src}"],
        tmp_path,
    )  # fmt: skip
    assert res.returncode == 2 and "clip_source" in res.stderr
