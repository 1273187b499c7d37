"""Issue 54 items 1, 3 and 4: the default detector set, English NER pipelines found from the installed packages'
metadata, the public-rarity detector, and NER and Presidio run for real with the installed small pipeline."""

from __future__ import annotations

import json
import os
import sys

import pytest

from hf_textdp.errors import MissingExtraError
from hf_textdp.sensitive import BUILTIN_DETECTORS, build_detectors, defaults, parse_sensitive, resolve_detectors
from hf_textdp.sensitive.detectors import selection_info
from hf_textdp.sensitive.rare import RareDetector


def test_default_set_is_every_rule_plus_ner_name_and_rare_where_installed(monkeypatch):
    spec = parse_sensitive({"epsilon": 1.0})
    assert spec.is_default and parse_sensitive({"epsilon": 1.0, "detectors": "default"}) == spec
    monkeypatch.setattr(defaults, "best_english_ner", lambda: "xx_some_ner")
    monkeypatch.setattr(defaults, "_wordfreq", lambda: True)
    assert resolve_detectors(spec) == (*BUILTIN_DETECTORS, "spacy:xx_some_ner", "name", "rare")
    info = selection_info(spec)
    assert info["default_set"] and info["left_out"] == []
    assert info["cannot_find"] == ["nationality or group"]  # NORP is not among the default labels
    # a list still overrides
    assert resolve_detectors(parse_sensitive({"epsilon": 1.0, "detectors": ["email"]})) == ("email",)


def test_default_set_without_ner_or_wordfreq_says_what_is_left_out(monkeypatch):
    monkeypatch.setattr(defaults, "best_english_ner", lambda: None)
    monkeypatch.setattr(defaults, "_wordfreq", lambda: False)
    spec = parse_sensitive({"epsilon": 1.0, "others": "keep"})
    assert resolve_detectors(spec) == BUILTIN_DETECTORS
    info = selection_info(spec)
    assert [x["name"] for x in info["left_out"]] == ["spacy", "name", "rare"]
    assert "python -m spacy download en_core_web_sm" in info["left_out"][0]["reason"]
    assert "hf-textdp[ner]" in info["left_out"][0]["reason"]
    assert info["cannot_find"] == ["person name", "place", "organisation", "nationality or group", "rare word"]


def _fake_pipeline(root, dist, package, meta):
    """An installed spaCy pipeline package as spaCy's packaging lays it out: the spacy_models entry point in its
    dist-info, meta.json in a versioned folder inside the package."""
    info = root / f"{dist}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[spacy_models]\n{package} = {package}\n", encoding="utf-8")
    data = root / package / f"{package}-1.0"
    data.mkdir(parents=True)
    (root / package / "__init__.py").write_text("", encoding="utf-8")
    (data / "meta.json").write_text(json.dumps(meta), encoding="utf-8")


def test_english_ner_pipelines_are_found_from_package_metadata(tmp_path, monkeypatch):
    """Any package registered as a spaCy pipeline counts, whatever its name; English with an ner component only,
    the best NER F-score first."""
    pytest.importorskip("spacy")
    _fake_pipeline(
        tmp_path,
        "my-clinic-ner",
        "my_clinic_ner",
        {"lang": "en", "pipeline": ["ner"], "performance": {"ents_f": 0.99}},
    )
    _fake_pipeline(
        tmp_path, "de-ner", "de_ner_pipe", {"lang": "de", "pipeline": ["ner"], "performance": {"ents_f": 1.0}}
    )
    _fake_pipeline(tmp_path, "en-tagger", "en_tagger_only", {"lang": "en", "pipeline": ["tagger"]})
    monkeypatch.syspath_prepend(str(tmp_path))
    defaults.english_ner_pipelines.cache_clear()
    try:
        found = defaults.english_ner_pipelines()
        assert found[0] == ("my_clinic_ner", 0.99)
        names = [n for n, _ in found]
        assert "de_ner_pipe" not in names and "en_tagger_only" not in names
        assert defaults.best_english_ner() == "my_clinic_ner"
    finally:
        defaults.english_ner_pipelines.cache_clear()


def test_rare_selects_words_public_frequencies_call_rare():
    pytest.importorskip("wordfreq")
    text = "a fine film by tanakak and zqxann , really"
    found = [text[a:b] for a, b in RareDetector().detect([text]).to_lists()[0]]
    assert found == ["tanakak", "zqxann"]
    # a lower threshold selects fewer words; "film" is common at every threshold in (0, 8)
    assert RareDetector("rare:7").detect([text]).to_lists()[0] != RareDetector("rare:1").detect([text]).to_lists()[0]
    assert all(text[a:b] != "film" for a, b in RareDetector("rare:5").detect([text]).to_lists()[0])


def test_rare_without_wordfreq_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "wordfreq", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'hf-textdp\[ner\]'"):
        RareDetector().detect(["x"])


@pytest.mark.parametrize("bad", ["rare:0", "rare:9", "rare:x"])
def test_rare_threshold_is_checked(bad):
    from hf_textdp.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match=r"rare:ZIPF"):
        parse_sensitive({"epsilon": 1.0, "detectors": [bad]})


# --------------------------------------------------------------------------- the real pipelines (no mock)
def _installed_ner() -> str:
    pytest.importorskip("spacy")
    name = defaults.best_english_ner()
    if name is None:
        if os.environ.get("CI"):  # CI installs the dev extra, which holds one: its NER path must run, not skip
            pytest.fail("no English spaCy pipeline with NER is installed in CI (the dev extra holds one)")
        pytest.skip("no English spaCy pipeline with NER is installed (pip install 'hf-textdp[ner]')")
    return name


@pytest.mark.slow
def test_ner_detector_skips_only_components_ner_does_not_read():
    """The spaCy detector loads its pipeline without the tagger, lemmatizer and attribute ruler: the entities are
    those of the whole pipeline (the parser's sentence boundaries kept)."""
    import spacy

    from hf_textdp.sensitive.models import SpacyDetector
    from hf_textdp.sensitive.rules import trim_labels

    name = _installed_ner()
    texts = [
        "u . s . audiences may find attal and gainsbourg's personas unfamiliar . John Smith lives at 12 Baker Street.",
        "a fine film , said Maria Garcia of Paris on 3 May 2021 .",
        "ask john smith about the ending ; the Acme Corp. board met in New York .",
    ]
    full = spacy.load(name)
    expected = [
        [trim_labels(t, e.start_char, e.end_char) for e in d.ents if e.label_ in {"PERSON", "GPE", "ORG"}]
        for t, d in zip(texts, full.pipe(texts), strict=True)
    ]
    det = SpacyDetector(f"spacy:{name}", ("PERSON", "GPE", "ORG"))
    assert det.detect(texts).to_lists() == expected
    assert "tagger" in det._load().disabled and "parser" not in det._load().disabled


@pytest.mark.slow
def test_default_set_runs_real_ner_on_names():
    """The default set with the installed English pipeline finds names that no rule finds, capitalised or not."""
    name = _installed_ner()
    spec = parse_sensitive({"epsilon": 1.0})
    dets = build_detectors(spec)
    assert f"spacy:{name}" in [d.name for d in dets]
    (ner,) = [d for d in dets if d.name.startswith("spacy:")]
    texts = ["a fine film , said Maria Garcia .", "ask john smith about the ending", "ref #I-5947-YWC casual ode"]
    found = [[t[a:b] for a, b in row] for t, row in zip(texts, ner.detect(texts).to_lists(), strict=True)]
    assert found[0] == ["Maria Garcia"] and found[1] == ["john smith"]
    assert found[2] == ["I-5947-YWC"]  # the pipeline's ORG "ref" is a cue word, trimmed off (an empty span)


@pytest.mark.slow
def test_presidio_runs_with_the_installed_small_pipeline():
    """Presidio's NLP engine is configured with the installed English pipeline (not en_core_web_lg), runs, and the
    report names the pipeline it used."""
    pytest.importorskip("presidio_analyzer")
    name = _installed_ner()
    spec = parse_sensitive({"epsilon": 1.0, "detectors": ["presidio"]})
    (det,) = build_detectors(spec)
    text = "Maria Garcia wrote from maria.garcia@example.com"
    found = [text[a:b] for a, b in det.detect([text]).to_lists()[0]]
    assert "Maria Garcia" in found and any("maria.garcia@example.com" in f for f in found)
    expected = "en_core_web_lg" if "en_core_web_lg" in [n for n, _ in defaults.english_ner_pipelines()] else name
    assert selection_info(spec)["detectors"][0]["pipeline"] == expected


@pytest.mark.slow
@pytest.mark.minilm
def test_default_set_in_num_proc_workers_releases_what_one_process_does():
    """privatize_dataset(num_proc=2) with the default set (spaCy's pipeline loaded in each worker) gives the rows
    num_proc=1 gives: the selection and the row-keyed draws do not depend on the process."""
    datasets = pytest.importorskip("datasets")
    from hf_textdp import PrivatizerConfig, privatize_dataset

    texts = [
        f"row {i}: a fine film , said Maria Garcia ; call +44 20 7946 09{i:02d} or isa tarantino" for i in range(24)
    ]
    ds = datasets.Dataset.from_dict({"text": texts})
    cfg = PrivatizerConfig(mechanism="madlib", epsilon=100.0, sensitive={"epsilon": 1.0})
    one = privatize_dataset(ds, cfg, seed=2**40 + 7, num_proc=1)
    two = privatize_dataset(ds, cfg, seed=2**40 + 7, num_proc=2)
    assert one["input_ids"] == two["input_ids"] and one["dp_sensitive_tokens"] == two["dp_sensitive_tokens"]
    assert min(one["dp_sensitive_tokens"]) > 0
