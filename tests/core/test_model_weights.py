"""Model errors blame the model (issue 53, M1): NaN, infinity or an absurd value in an embedding row is refused as
weights that are not finite (it was blamed on ε, a zero median norm or equal rows), and a model folder without
weights says so (it was "unexpected OSError")."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hf_textdp import Privatizer, PrivatizerConfig
from hf_textdp.errors import InvalidParameterError, ModelNotFoundError
from tests.utils import CLI, error_lines, small_jsonl


ROW = 40


def _damaged(tiny_bert: str, folder: Path, value: float, dtype: str = "float32") -> str:
    """A copy of the tiny BERT whose embedding row ``ROW`` holds ``value`` (stored as ``dtype``)."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(tiny_bert, folder)
    tensors = load_file(str(folder / "model.safetensors"))
    key = next(k for k in tensors if "word_embeddings" in k)
    weight = tensors[key].to(getattr(torch, dtype))
    weight[ROW, 3] = value
    tensors[key] = weight
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return str(folder)


CASES = {
    "nan": (float("nan"), "float32", "holds NaN"),
    "inf": (float("inf"), "float32", "holds an infinite value"),
    "1e39-float64": (1e39, "float64", "holds an infinite value \\(as float32\\)"),
    "1e30-norm": (1e30, "float32", "has norm 1e\\+30, above"),
}


@pytest.mark.parametrize("mechanism", ["madlib", "laplace", "privemb", "tem", "santext"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_non_finite_embedding_row_is_blamed_on_the_weights(case, mechanism, tiny_bert, tmp_path):
    value, dtype, what = CASES[case]
    model = _damaged(tiny_bert, tmp_path / "model", value, dtype)
    cfg = PrivatizerConfig(epsilon=10.0, mechanism=mechanism, model=model)
    with pytest.raises(
        InvalidParameterError, match=rf"model '.*model': the model's weights are not .*row \(token id\) {ROW} {what}"
    ):
        _ = Privatizer(cfg, seed=2**40 + 1).engine.claim


def test_a_vector_file_with_a_value_beyond_float32_is_refused(tmp_path):
    vec = tmp_path / "v.txt"
    vec.write_text("a 0.0 0.0\nb 1e39 0.0\nc 0.0 1.0\n")  # finite as float64, infinite as float32
    with pytest.raises(InvalidParameterError, match=r"weights are not finite: embedding row \(word #, 0-based\) 1"):
        _ = Privatizer(PrivatizerConfig(epsilon=10.0, model=str(vec)), seed=2**40 + 1).engine.claim


def test_a_model_folder_without_weights_says_so(tiny_bert, tmp_path):
    folder = tmp_path / "noweights"
    shutil.copytree(tiny_bert, folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(ModelNotFoundError, match=r"holds no weights \(no \*.safetensors, \*.bin"):
        _ = Privatizer(PrivatizerConfig(epsilon=10.0, model=str(folder)), seed=2**40 + 1).engine.claim
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_TEXTDP_CACHE": str(tmp_path / "cache")}
    argv = [*CLI, "privatize", str(small_jsonl(tmp_path)), str(tmp_path / "o.jsonl"), "--model", str(folder)]
    done = subprocess.run([*argv, "--epsilon", "10"], capture_output=True, text=True, env=env)
    assert done.returncode == 2
    (line,) = error_lines(done.stderr)
    assert "holds no weights" in line and "unexpected" not in line
