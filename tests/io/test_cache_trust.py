"""Values read back from the cache are checked before they decide a report's figures, and compiled kernels before
they are loaded (issue 53, R4): an edited entry fails its SHA-256, an entry others may write or another user owns
is not read, a kernel whose bytes changed or that is a link is built again."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

import hf_textdp.scale as scale_mod
import hf_textdp.utils.file_trust as file_trust
from hf_textdp import Privatizer, PrivatizerConfig
from hf_textdp.io.cache import DiskCache
from hf_textdp.utils import native


pytestmark = pytest.mark.usefixtures("private_textdp_cache")
VALUE = {"diam": 0.25, "median_rho1": 0.06}


def _entry(cache: Path) -> Path:
    DiskCache().save("scale", "k" * 64, VALUE)
    return cache / "scale" / f"{'k' * 64}.json"


def test_an_entry_round_trips_and_its_folder_is_private(private_textdp_cache):
    path = _entry(private_textdp_cache)
    assert DiskCache().load("scale", "k" * 64) == VALUE
    assert (path.parent.stat().st_mode & 0o777) == 0o700 and (path.stat().st_mode & 0o077) == 0


def test_an_edited_value_fails_its_check(private_textdp_cache, caplog):
    path = _entry(private_textdp_cache)
    raw = json.loads(path.read_text())
    raw["value"]["diam"] /= 1e4  # what the issue did: the diameter divided by 10^4, the hash left as it was
    path.write_text(json.dumps(raw))
    with caplog.at_level(logging.WARNING):
        assert DiskCache().load("scale", "k" * 64) is None
    assert "fails its SHA-256 check (it was edited): computing it again" in caplog.text


def test_an_entry_filed_under_another_key_fails_its_check(private_textdp_cache):
    path = _entry(private_textdp_cache)
    path.rename(path.with_name(f"{'j' * 64}.json"))  # a value of other inputs, copied under this key
    assert DiskCache().load("scale", "j" * 64) is None


def test_a_bare_value_of_an_older_version_is_computed_again(private_textdp_cache):
    path = _entry(private_textdp_cache)
    path.write_text(json.dumps(VALUE))
    assert DiskCache().load("scale", "k" * 64) is None


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX owners and modes")
def test_an_entry_others_may_write_or_another_user_owns_is_not_read(private_textdp_cache, monkeypatch):
    path = _entry(private_textdp_cache)
    path.chmod(0o666)
    assert DiskCache().load("scale", "k" * 64) is None
    path.chmod(0o600)
    assert DiskCache().load("scale", "k" * 64) == VALUE
    monkeypatch.setattr(file_trust, "_uid", lambda: os.getuid() + 1)  # as another user sees this file
    assert DiskCache().load("scale", "k" * 64) is None
    assert "belongs to another user" in str(file_trust.untrusted(path))


def test_the_report_states_the_true_diameter_after_the_cache_was_edited(tiny_bert, private_textdp_cache, monkeypatch):
    """The issue's reproduction in one process: the cached diameters divided by 10^4, the in-process memo cleared
    (a new process), the same config: the report's ε_tok is the true one."""
    import hf_textdp.io.models as models

    def new_process() -> None:  # only the disk cache is warm
        monkeypatch.setattr(scale_mod, "_MEMO", {})
        monkeypatch.setattr(models, "_CACHE", {})

    cfg = PrivatizerConfig(epsilon=100.0, model=tiny_bert)
    new_process()
    before = Privatizer(cfg, seed=2**40 + 1).engine.claim.epsilon_token
    edited = 0
    for path in (private_textdp_cache / "scale").glob("*.json"):
        raw = json.loads(path.read_text())
        if "diam" in raw["value"]:
            raw["value"]["diam"] /= 1e4
            path.write_text(json.dumps(raw))
            edited += 1
    assert edited
    new_process()
    assert Privatizer(cfg, seed=2**40 + 1).engine.claim.epsilon_token == before


@pytest.fixture
def kernel(private_textdp_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The philox kernel built into this test's cache (skipped without a C compiler)."""
    monkeypatch.setattr(native, "_loaded", {})
    if native.load_kernel("philox") is None:
        pytest.skip("no C compiler")
    (lib,) = (private_textdp_cache / "native").glob("philox-*.so")
    monkeypatch.setattr(native, "_loaded", {})
    return lib


def test_a_built_kernel_is_private_and_recorded(kernel):
    assert (kernel.parent.stat().st_mode & 0o777) == 0o700
    assert kernel.with_name(kernel.name + ".sha256").read_text().strip() == native._file_sha256(kernel)
    assert native._verified(kernel)


@pytest.mark.parametrize("tamper", ["flipped-byte", "symlink", "group-writable"])
def test_a_changed_kernel_is_built_again_not_loaded(tamper, kernel, tmp_path, caplog):
    if tamper == "flipped-byte":
        data = bytearray(kernel.read_bytes())
        data[len(data) // 2] ^= 0xFF
        # a new file in its place, as another process would leave it: writing this process's loaded library in
        # place would change its mapped pages, and the interpreter's exit would run a garbled destructor (exit 139)
        changed = tmp_path / "changed.so"
        changed.write_bytes(bytes(data))
        os.replace(changed, kernel)
    elif tamper == "symlink":
        other = tmp_path / "other.so"
        other.write_bytes(kernel.read_bytes())
        kernel.unlink()
        kernel.symlink_to(other)
    else:
        kernel.chmod(0o775)
    with caplog.at_level(logging.WARNING):
        assert not native._verified(kernel)
        assert native.load_kernel("philox") is not None  # built again
    assert "is not loaded" in caplog.text and "building it again" in caplog.text
    assert not kernel.is_symlink() and native._verified(kernel)


def test_an_edited_vector_parse_is_parsed_again(private_textdp_cache, tmp_path, caplog):
    """The parse cache of a word-vector file holds its matrix: a changed matrix fails its SHA-256."""
    import numpy as np

    from hf_textdp.io.vectors import read_vectors
    from tests.utils import write_vectors

    vec = write_vectors(tmp_path / "v.txt", ["a", "b", "c"], np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]]))
    first = read_vectors(vec)
    (entry,) = (private_textdp_cache / "vectors").glob("*.npz")
    with np.load(entry) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["matrix"] = arrays["matrix"] / 1e4
    with open(entry, "wb") as fh:
        np.savez(fh, **arrays)
    with caplog.at_level(logging.WARNING):
        again = read_vectors(vec)
    assert np.array_equal(again.matrix, first.matrix) and "fails its SHA-256 check" in caplog.text
