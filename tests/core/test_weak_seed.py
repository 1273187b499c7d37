"""Weak seeds (randomness.md, "Rules kept from v1"): a noise key below 2**32 can be searched, so it is refused
unless the caller passes ``allow_weak_seed=True`` (CLI ``--allow-weak-seed``)."""

from __future__ import annotations

import json
import pickle
import re

import datasets
import pytest

from hf_textdp import (
    DataCollatorWithPrivatization,
    PrivateTokenizer,
    Privatizer,
    PrivatizerConfig,
    privatize_dataset,
)
from hf_textdp.cli import main
from hf_textdp.errors import InvalidParameterError, ParameterTypeError
from hf_textdp.io.paths import report_path_for
from hf_textdp.rng import WEAK_SEED_BOUND, derive_row_seed
from tests.utils import corpus


pytestmark = pytest.mark.usefixtures("isolated_datasets_cache")

WEAK = 12345
STRONG = 2**40 + 12345
# the message names the parameter, why, and both fixes; the value itself is a secret and never printed
FIX = r"seed is below 2\*\*32 and can be searched.*secrets\.randbits\(64\).*allow_weak_seed=True.*--allow-weak-seed"


@pytest.fixture
def cfg(tiny_bert):
    return PrivatizerConfig(epsilon=5.0, model=tiny_bert)


def _privatizer(cfg, seed, **kw):
    return Privatizer(cfg, seed=seed, **kw)


def _dataset(cfg, seed, **kw):
    return privatize_dataset(datasets.Dataset.from_dict({"text": corpus(4, seed=1)}), cfg, seed=seed, **kw)


def _tokenizer(cfg, seed, **kw):
    return PrivateTokenizer(None, cfg, seed=seed, **kw)


def _collator(cfg, seed, **kw):
    return DataCollatorWithPrivatization(None, cfg, seed=seed, **kw)


ENTRIES = [_privatizer, _dataset, _tokenizer, _collator]
ENTRY_IDS = ["Privatizer", "privatize_dataset", "PrivateTokenizer", "DataCollatorWithPrivatization"]


@pytest.mark.parametrize("make", ENTRIES, ids=ENTRY_IDS)
@pytest.mark.parametrize("seed", [0, 1, WEAK, WEAK_SEED_BOUND - 1], ids=["zero", "one", "small", "2**32-1"])
def test_weak_seed_is_refused(make, seed, cfg):
    with pytest.raises(InvalidParameterError, match=FIX) as info:
        make(cfg, seed)
    message = str(info.value)
    assert "\n" not in message
    assert not re.search(rf"\b{seed}\b", message), "the seed must never appear in the error"


@pytest.mark.parametrize("make", ENTRIES, ids=ENTRY_IDS)
@pytest.mark.parametrize(
    "seed, kw",
    [(WEAK, {"allow_weak_seed": True}), (WEAK_SEED_BOUND, {}), (STRONG, {}), (2**64 - 1, {}), (None, {})],
    ids=["weak-allowed", "2**32", "strong", "2**64-1", "none"],
)
def test_seed_is_accepted(make, seed, kw, cfg):
    make(cfg, seed, **kw)


@pytest.mark.parametrize("make", ENTRIES, ids=ENTRY_IDS)
@pytest.mark.parametrize("seed", [True, False], ids=["True", "False"])
def test_bool_seed_is_still_refused(make, seed, cfg):
    with pytest.raises(ParameterTypeError, match="seed must be an int in \\[0, 2\\*\\*64\\) or None, got bool"):
        make(cfg, seed, allow_weak_seed=True)


@pytest.mark.parametrize("seed", [-1, 2**64], ids=["negative", "2**64"])
def test_out_of_range_seed_is_refused_even_when_weak_seeds_are_allowed(seed, cfg):
    with pytest.raises(InvalidParameterError, match=r"seed must be an int in \[0, 2\*\*64\)"):
        Privatizer(cfg, seed=seed, allow_weak_seed=True)


def test_allow_weak_seed_must_be_a_bool(cfg):
    with pytest.raises(ParameterTypeError, match="allow_weak_seed must be a bool, got int"):
        Privatizer(cfg, seed=STRONG, allow_weak_seed=1)  # type: ignore[arg-type]


def test_allowed_weak_seed_gives_the_same_noise_as_before(cfg):
    """The flag only lets the seed through: the noise is still keyed by it, as it always was."""
    texts = corpus(6, seed=2)
    a = Privatizer(cfg, seed=WEAK, allow_weak_seed=True).privatize(texts)
    b = Privatizer(cfg, seed=WEAK, allow_weak_seed=True).privatize(texts)
    assert a == b


def test_derive_row_seed_keeps_its_known_answers():
    """Not a user entry: its v1 known answers use seeds 0 and 1 (randomness.md)."""
    assert derive_row_seed(0, 0, "", 0) == 2844346950793067545
    assert derive_row_seed(1, 0, "", 0) == 2603403363308340002


# --------------------------------------------------------------------------- pickling and fingerprints
def test_pickled_weak_privatizer_still_works(cfg):
    """The flag is not pickled and an unpickled privatizer is not checked again (num_proc workers)."""
    priv = Privatizer(cfg, seed=WEAK, allow_weak_seed=True)
    clone = pickle.loads(pickle.dumps(priv))
    texts = corpus(4, seed=3)
    assert clone.privatize(texts) == priv.privatize(texts)
    collator = pickle.loads(pickle.dumps(_collator(cfg, WEAK, allow_weak_seed=True)))
    assert collator._encoder.engine.seed == WEAK


def test_strong_seed_fingerprint_is_unchanged_by_the_flag(cfg):
    from datasets.fingerprint import Hasher

    assert Hasher.hash(Privatizer(cfg, seed=STRONG)) == Hasher.hash(Privatizer(cfg, seed=STRONG, allow_weak_seed=True))
    assert "allow_weak_seed" not in Privatizer(cfg, seed=STRONG).__getstate__()


# --------------------------------------------------------------------------- the CLI
def _cli(tmp_path, tiny_bert, *extra):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in corpus(4, seed=4)))
    return main(["privatize", str(src), str(tmp_path / "out.jsonl"), "--epsilon", "5", "--model", tiny_bert, *extra])


@pytest.mark.parametrize("how", ["seed", "seed-file"])
def test_cli_refuses_a_weak_seed(how, tmp_path, tiny_bert, capsys):
    if how == "seed":
        args = ["--seed", str(WEAK)]
    else:
        (tmp_path / "my.seed").write_text(f"{WEAK}\n")
        args = ["--seed-file", str(tmp_path / "my.seed")]
    assert _cli(tmp_path, tiny_bert, *args) == 2
    err = capsys.readouterr().err
    assert re.search(FIX, err)
    assert str(WEAK) not in err
    assert not (tmp_path / "out.jsonl").exists()


def test_cli_accepts_a_weak_seed_with_the_flag(tmp_path, tiny_bert, capsys):
    assert _cli(tmp_path, tiny_bert, "--seed", str(WEAK), "--allow-weak-seed") == 0
    report = report_path_for(tmp_path / "out.jsonl").read_text()
    assert str(WEAK) not in report  # the seed is never recorded (randomness.md)


def test_cli_help_says_why(capsys):
    with pytest.raises(SystemExit):
        main(["privatize", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--allow-weak-seed" in out
    assert "search" in out and "public benchmark data" in out
