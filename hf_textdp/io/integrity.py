"""What a resume trusts in a work folder: the seed verifier, the manifest's seal and each shard's SHA-256.

A sharded or streaming run records every finished shard in its ``manifest.json`` (rows and SHA-256 of the file)
and seals the manifest: for a seeded run an HMAC-SHA256 keyed by a secret derived from the seed with the same
scrypt as the seed verifier, so an edit (a shard's hash, ``seeded``, the verifier) cannot be sealed again
without the seed; for an unseeded run a plain SHA-256, which catches an edit by hand or a damaged file. A resume
reuses a shard only when its bytes have the recorded hash; any other shard file is computed again
(docs/threat_model.md, "Interrupted runs and --resume").
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from pathlib import Path
from typing import Any

from ..utils.logging import get_logger
from .files import atomic_write_text, dumps_json, file_sha256
from .paths import MANIFEST_NAME


__all__ = [
    "SCRYPT_PARAMS",
    "seed_secrets",
    "seed_verifier",
    "other_seed",
    "file_sha256",
    "seal_of",
    "seal_problem",
    "unlink_links",
    "ShardLedger",
]

logger = get_logger("hf_textdp.pipeline")

#: scrypt's cost parameters for the seed verifier (RFC 7914): 16 MiB and tens of milliseconds per guess
SCRYPT_PARAMS = {"n": 2**14, "r": 8, "p": 1}
_SEAL_KEY = "seal"


def seed_secrets(seed: int, salt: bytes) -> tuple[str, bytes]:
    """(the verifier's hex digest, the manifest's 32-byte sealing key) of ``seed``: one scrypt (RFC 7914) of its
    8 bytes, 64 bytes long. PBKDF2's first block does not depend on the length asked for, so the digest is the
    32-byte scrypt that :func:`seed_verifier` always stored; the key, the second half, is never written."""
    out = hashlib.scrypt(seed.to_bytes(8, "big"), salt=salt, maxmem=64 * 2**20, dklen=64, **SCRYPT_PARAMS)
    return out[:32].hex(), out[32:]


def seed_verifier(seed: int, salt: bytes | None = None) -> dict[str, Any]:
    """A verifier of the secret ``seed`` for the manifest of a seeded run: scrypt (RFC 7914) of its 8 bytes with
    a fresh 16-byte ``salt`` (or the given one, to check a seed against a stored verifier).

    Safe to keep beside the output: testing a guessed seed against it costs one scrypt (16 MiB, tens of ms),
    more than testing the guess against the released output (a SHA-256 and a few noise draws per token), so it
    makes no search for the seed cheaper; the per-run salt rules out precomputed tables. Two seeds give the same
    32-byte digest with probability 2**-256, so another seed never passes by chance, whatever the mechanism or
    epsilon (a re-privatized row at a high epsilon often agrees under any seed).
    """
    salt = secrets.token_bytes(16) if salt is None else salt
    digest = seed_secrets(seed, salt)[0]
    return {"kdf": "scrypt", **SCRYPT_PARAMS, "salt": salt.hex(), "digest": digest}


def _verifier_ok(stored: Any) -> bool:
    return isinstance(stored, dict) and {k: stored.get(k) for k in ("kdf", *SCRYPT_PARAMS)} == {
        "kdf": "scrypt",
        **SCRYPT_PARAMS,
    }


def other_seed(old: dict[str, Any], seed: int | None) -> str | None:
    """Why the seeded partial run whose manifest is ``old`` cannot be continued with ``seed`` (``None``: it can):
    its :func:`seed_verifier` does not match, or it has none (written by an older version, which did not store
    one). The seed itself is never stored or printed."""
    stored = old.get("seed_verifier")
    if seed is None or not old.get("seeded"):
        return None
    if not _verifier_ok(stored) or not isinstance(stored, dict):
        return "it records no verifier of its seed (an older version wrote it), so its seed cannot be checked"
    try:
        again = seed_verifier(seed, bytes.fromhex(str(stored.get("salt"))))["digest"]
    except ValueError:
        return "its seed verifier is damaged, so its seed cannot be checked"
    if not hmac.compare_digest(again, str(stored.get("digest"))):
        return (
            "it was privatized with another seed (its seed verifier does not match this run's seed); resume needs "
            "the seed of the partial run"
        )
    return None


def _sealing_key(manifest: dict[str, Any], seed: int | None) -> bytes | None:
    """The HMAC key of a seeded manifest (from its verifier's salt and ``seed``); ``None`` for an unseeded one."""
    if seed is None or not _verifier_ok(manifest.get("seed_verifier")):
        return None
    try:
        salt = bytes.fromhex(str(manifest["seed_verifier"]["salt"]))
    except ValueError:
        return None
    return seed_secrets(seed, salt)[1]


def seal_of(manifest: dict[str, Any], key: bytes | None) -> dict[str, str]:
    """The seal of ``manifest`` (every key but the seal): HMAC-SHA256 under ``key``, else SHA-256, of its
    canonical JSON."""
    body = json.dumps({k: v for k, v in manifest.items() if k != _SEAL_KEY}, sort_keys=True, default=str).encode()
    if key is None:
        return {"kind": "sha256", "digest": hashlib.sha256(body).hexdigest()}
    return {"kind": "hmac-sha256", "digest": hmac.new(key, body, hashlib.sha256).hexdigest()}


def seal_problem(manifest: dict[str, Any], seed: int | None) -> str | None:
    """Why the sealed ``manifest`` cannot be trusted by a run with ``seed`` (``None``: it can).

    ``seeded`` must agree with the verifier (a seeded manifest holds one, an unseeded one none), and the seal
    must be the one :func:`seal_of` gives: the HMAC under the seed's key for a seeded run, whose verifier
    ``seed`` has already passed (:func:`other_seed`), else the SHA-256.
    """
    has_verifier = manifest.get("seed_verifier") is not None
    if bool(manifest.get("seeded")) != has_verifier:
        return (
            f"its manifest.json was edited (it says seeded={bool(manifest.get('seeded'))} but "
            f"{'holds' if has_verifier else 'lacks'} a seed verifier)"
        )
    key = _sealing_key(manifest, seed) if has_verifier else None
    if has_verifier and key is None:
        return "its manifest.json was edited (its seed verifier is damaged)"
    stored = manifest.get(_SEAL_KEY)
    want = seal_of(manifest, key)
    if not isinstance(stored, dict) or not hmac.compare_digest(str(stored.get("digest")), want["digest"]):
        return "its manifest.json was changed after the run wrote it (its seal does not match its content)"
    return None


def unlink_links(work: Path) -> list[str]:
    """Remove every symbolic link in the work folder ``work`` and in its ``split-NNN`` folders (the link only,
    never its target): a run writes and reads only real files there. Return the removed names."""
    removed: list[str] = []
    if work.is_symlink() or not work.is_dir():
        return removed
    for child in sorted(work.iterdir()):
        if child.is_symlink():
            child.unlink()
            removed.append(child.name)
        elif child.is_dir():
            for inner in sorted(child.iterdir()):
                if inner.is_symlink():
                    inner.unlink()
                    removed.append(f"{child.name}/{inner.name}")
    if removed:
        logger.warning(
            "removed %d symbolic link(s) from the work folder %s (a run never follows a link there): %s",
            len(removed),
            work,
            ", ".join(removed),
        )
    return removed


class ShardLedger:
    """The sealed manifest of a work folder in use: the finished shards it records and their verification.

    ``manifest["shards"]`` maps a shard's path inside the work folder (``split-000/shard-00000.arrow``) to its
    ``rows``, ``sha256`` and any writer-specific fields (a stream's position after it). Every change is
    written at once, sealed (:func:`seal_of`), atomically.
    """

    def __init__(self, work: Path, manifest: dict[str, Any], seed: int | None) -> None:
        self.work = work
        self.manifest = manifest
        self.manifest.setdefault("shards", {})
        self._key = _sealing_key(manifest, seed) if manifest.get("seeded") else None

    @property
    def shards(self) -> dict[str, dict[str, Any]]:
        shards: dict[str, dict[str, Any]] = self.manifest["shards"]
        return shards

    def write(self) -> None:
        """Seal the manifest and write it atomically."""
        self.manifest[_SEAL_KEY] = seal_of(self.manifest, self._key)
        atomic_write_text(self.work / MANIFEST_NAME, dumps_json(self.manifest))

    def record(self, rel: str, rows: int, **extra: Any) -> None:
        """Record the finished shard ``rel`` (its hash is read from the file just written), then write."""
        self.shards[rel] = {"rows": rows, "sha256": file_sha256(self.work / rel), **extra}
        self.write()

    def forget(self, rels: list[str]) -> None:
        """Drop the records of ``rels`` (shards to compute again), then write."""
        for rel in rels:
            self.shards.pop(rel, None)
        self.write()

    def verified(self, rel: str, rows: int | None = None) -> bool:
        """Whether the shard file ``rel`` is the one recorded: a real file (not a link) whose SHA-256 (and
        ``rows``, when given) is the manifest's. A file there that is not is logged, naming it."""
        path = self.work / rel
        rec = self.shards.get(rel)
        if path.is_symlink() or not path.is_file():
            if rec is not None:
                logger.warning("%s: the recorded shard %s is missing: computing it again", self.work, rel)
            return False
        if rec is None:
            logger.warning("%s: the shard %s is not recorded in the manifest: computing it again", self.work, rel)
            return False
        if (rows is not None and rec.get("rows") != rows) or not hmac.compare_digest(
            str(rec.get("sha256")), file_sha256(path)
        ):
            logger.warning(
                "%s: the shard %s does not match the SHA-256 its manifest records (it changed after it was "
                "written): computing it again",
                self.work,
                rel,
            )
            return False
        return True
