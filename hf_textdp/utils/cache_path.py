"""Where hf-textdp keeps derived, public files: the ``cache`` setting (:func:`hf_textdp.settings.cache_root`)."""

from __future__ import annotations

from pathlib import Path

from .. import settings


__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """:func:`hf_textdp.settings.cache_root` (read at each call, so a changed variable counts)."""
    return Path(settings.cache_root())
