"""Fixtures of the per-person tests: the 1-D vocabulary (0, 1, 3) of testing.md's T1D known answers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.utils import write_vectors


X = np.array([[0.0], [1.0], [3.0]])  # diam 3: madlib's ε_tok = 3·ε


@pytest.fixture
def t1d(tmp_path: Path) -> str:
    return str(write_vectors(tmp_path / "t1d.txt", ["x0", "x1", "x2"], X))
