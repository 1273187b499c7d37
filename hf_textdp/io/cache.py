"""The on-disk cache of derived, public quantities (scale statistics, sensitivities, projection constants)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..utils.cache_path import cache_dir
from ..utils.logging import get_logger
from .files import atomic_write_text


__all__ = ["cache_dir", "DiskCache"]

logger = get_logger(__name__)


class DiskCache:
    """:class:`hf_textdp.memo.Store` on disk: ``<cache_dir()>/<kind>/<key>.json``, written atomically.

    The folder is read at each call, so a changed cache setting (:mod:`hf_textdp.settings`) counts.
    """

    def path(self, kind: str, key: str) -> Path:
        return cache_dir() / kind / f"{key}.json"

    def load(self, kind: str, key: str) -> dict[str, Any] | None:
        path = self.path(kind, key)
        if not path.is_file():
            return None
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return raw if isinstance(raw, dict) else None

    def save(self, kind: str, key: str, value: dict[str, Any]) -> None:
        try:
            atomic_write_text(self.path(kind, key), json.dumps(value, sort_keys=True))
        except OSError as err:
            logger.debug("could not write the %s cache: %s", kind, err)
