"""Where hf-textdp keeps derived, public files: ``$HF_TEXTDP_CACHE``, else ``~/.cache/hf_textdp``."""

from __future__ import annotations

import os
from pathlib import Path


__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """``$HF_TEXTDP_CACHE``, else ``~/.cache/hf_textdp`` (read at each call, so a changed variable counts)."""
    root = os.environ.get("HF_TEXTDP_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "hf_textdp")
    return Path(root)
