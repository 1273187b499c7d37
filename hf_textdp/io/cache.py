"""The on-disk cache of derived, public quantities (scale statistics, projection constants)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$HF_TEXTDP_CACHE``, else ``~/.cache/hf_textdp``."""
    root = os.environ.get("HF_TEXTDP_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "hf_textdp")
    return Path(root)
