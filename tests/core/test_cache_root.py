"""The cache folder (settings.cache_root): HF_TEXTDP_CACHE wins, then HF_HOME, then the platform's user cache."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hf_textdp import settings
from hf_textdp.utils.cache_path import cache_dir


def test_cache_root_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HF_TEXTDP_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    if sys.platform.startswith("linux"):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert cache_dir() == tmp_path / "xdg" / "hf_textdp"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert cache_dir() == tmp_path / "hf" / "hf_textdp"
    monkeypatch.setenv("HF_TEXTDP_CACHE", str(tmp_path / "own"))
    assert settings.cache_root() == str(tmp_path / "own")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the XDG default is Linux's")
def test_cache_root_default_unchanged_on_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HF_TEXTDP_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    assert cache_dir() == Path.home() / ".cache" / "hf_textdp"
