"""The CLI starts without torch: ``hf_textdp.cli``'s help reads :mod:`hf_textdp.cli.catalog`, which must say what the
registries say; ``--version`` prints the package's version."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hf_textdp import candidates, space
from hf_textdp.cli import catalog, main
from hf_textdp.mechanisms import get_mechanism_class, list_mechanisms
from hf_textdp.postprocess import list_postprocess
from hf_textdp.sensitive import BUILTIN_DETECTORS
from hf_textdp.version import __version__


ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "datasets", "numpy", "scipy", "pyarrow", "pandas")


def test_catalog_is_the_registries() -> None:
    assert list(catalog.MECHANISMS) == list_mechanisms()
    for name, info in catalog.MECHANISMS.items():
        cls = get_mechanism_class(name)
        assert info.options == dict(getattr(cls, "OPTIONS", {})), name
        assert info.postprocess == tuple(getattr(cls, "POSTPROCESS", ())), name
        assert info.uses_delta == bool(getattr(cls, "USES_DELTA", False)), name
        assert info.default_delta == getattr(cls, "DEFAULT_DELTA", None), name
    assert list(catalog.POSTPROCESS) == list_postprocess()
    assert catalog.CANDIDATE_SETS == tuple(candidates.CANDIDATE_SETS)
    assert catalog.CLASS_MODES == tuple(candidates.CLASS_MODES)
    assert catalog.DEFAULT_CANDIDATES == candidates.DEFAULT_CANDIDATES
    assert catalog.SCRIPTS == tuple(candidates.SCRIPTS)
    assert catalog.DETECTORS == BUILTIN_DETECTORS
    assert catalog.DEFAULT_MODEL == space.DEFAULT_MODEL


def _fresh(code: str) -> str:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_cli_imports_no_heavy_library() -> None:
    """``import hf_textdp.cli`` and building every command's parser (what ``--help`` does) import neither torch
    nor transformers, datasets, numpy, … (a fresh interpreter's sys.modules)."""
    out = _fresh(
        "import sys, hf_textdp.cli as c; c.build_parser()\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules)); print(c.__file__)"
    )
    loaded, where = out.splitlines()
    assert loaded == "[]"
    assert Path(where).is_relative_to(ROOT)  # this checkout's CLI, not another install's


def test_help_imports_no_heavy_library() -> None:
    """Each command's ``--help`` through ``main`` leaves torch unimported."""
    out = _fresh(
        "import contextlib, io, sys\nfrom hf_textdp.cli import main\n"
        "for cmd in ['privatize', 'calibrate', 'report', 'audit', 'env', 'evaluate', 'attack', 'card', 'push', "
        "'bench']:\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        try:\n            main([cmd, '--help'])\n"
        "        except SystemExit:\n            pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    assert out.strip() == "[]"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"hf-textdp {__version__}\n"
