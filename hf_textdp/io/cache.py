"""The on-disk cache of derived, public quantities (scale statistics, sensitivities, projection constants).

A value read back decides figures a privacy report states (a diameter makes ε_tok), so it is trusted only as far
as it can be checked (issue 53, R4): each entry is keyed by the SHA-256 of the inputs it was derived from (its
file name) and holds its kind, key and value with the SHA-256 of the three, checked on every read; and it is read
only from a file and folder this user owns that no one else may write (:mod:`hf_textdp.utils.file_trust`). An
entry that fails is computed again and rewritten, with a warning that names it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

from ..utils.cache_path import cache_dir
from ..utils.file_trust import private_dir, untrusted
from ..utils.logging import get_logger, warn_once
from .files import atomic_write_text


__all__ = ["cache_dir", "DiskCache", "ENTRY_FORMAT"]

logger = get_logger(__name__)

#: the ``format`` of a checked entry (older entries, a bare value, are computed again once)
ENTRY_FORMAT = "hf_textdp/cache/v1"


def _digest(kind: str, key: str, value: Any) -> str:
    body = json.dumps({"kind": kind, "key": key, "value": value}, sort_keys=True)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


class DiskCache:
    """:class:`hf_textdp.memo.Store` on disk: ``<cache_dir()>/<kind>/<key>.json``, written atomically.

    The folder is read at each call, so a changed cache setting (:mod:`hf_textdp.settings`) counts.
    """

    def path(self, kind: str, key: str) -> Path:
        return cache_dir() / kind / f"{key}.json"

    def load(self, kind: str, key: str) -> dict[str, Any] | None:
        """The value stored under ``kind``/``key``, or ``None`` when absent, untrusted or failing its check."""
        path = self.path(kind, key)
        if not path.is_file():
            return None
        why = untrusted(path)
        if why is not None:
            warn_once(logger, f"cache-trust:{path.parent}", f"the cache entry {path} is not read: {why}")
            return None
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        ok = (
            isinstance(raw, dict)
            and raw.get("format") == ENTRY_FORMAT
            and (raw.get("kind"), raw.get("key")) == (kind, key)
            and isinstance(raw.get("value"), dict)
            and hmac.compare_digest(str(raw.get("sha256")), _digest(kind, key, raw["value"]))
        )
        if not ok:
            if isinstance(raw, dict) and raw.get("format") == ENTRY_FORMAT:  # an older bare value is no alarm
                logger.warning("the cache entry %s fails its SHA-256 check (it was edited): computing it again", path)
            return None
        value: dict[str, Any] = raw["value"]
        return value

    def save(self, kind: str, key: str, value: dict[str, Any]) -> None:
        entry = {"format": ENTRY_FORMAT, "kind": kind, "key": key, "value": value}
        try:
            private_dir(self.path(kind, key).parent)
            entry["sha256"] = _digest(kind, key, value)
            atomic_write_text(self.path(kind, key), json.dumps(entry, sort_keys=True))
        except (OSError, ValueError) as err:
            logger.debug("could not write the %s cache: %s", kind, err)
