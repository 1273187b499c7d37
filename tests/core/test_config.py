"""PrivatizerConfig: validation at construction, JSON round trips, no seed anywhere."""

from __future__ import annotations

import json
import math

import pytest

from hf_textdp import HfTextDPError, PrivatizerConfig
from hf_textdp.errors import InvalidParameterError, ParameterTypeError, UnknownMechanismError, UnknownOptionError


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"epsilon": 0}, InvalidParameterError, r"epsilon must be a finite float > 0.*got 0"),
        ({"epsilon": -1.0}, InvalidParameterError, r"epsilon.*got -1.0"),
        ({"epsilon": math.nan}, InvalidParameterError, r"epsilon.*nan"),
        ({"epsilon": math.inf}, InvalidParameterError, r"epsilon.*test_mode"),
        ({"epsilon": -math.inf}, InvalidParameterError, r"epsilon"),
        ({"epsilon": True}, ParameterTypeError, r"epsilon must be a number, got bool"),
        ({"epsilon": "1"}, ParameterTypeError, r"epsilon must be a number, got str"),
        ({"epsilon": 1.0, "mechanism": "madlb"}, UnknownMechanismError, r"Unknown mechanism 'madlb'.*madlib"),
        ({"epsilon": 1.0, "postprocess": "nearst"}, InvalidParameterError, r"Unknown postprocess 'nearst'"),
        ({"epsilon": 1.0, "delta": 0.0}, InvalidParameterError, r"delta must be a float in \(0, 1\)"),
        ({"epsilon": 1.0, "delta": 1.0}, InvalidParameterError, r"delta must be a float in \(0, 1\)"),
        ({"epsilon": 1.0, "delta": 1e-6}, InvalidParameterError, r"delta: mechanism 'madlib' uses no delta"),
        ({"epsilon": 1.0, "options": {"beta": 0.5}}, UnknownOptionError, r"\['beta'\].*madlib"),
        ({"epsilon": 1.0, "options": {"bound": "bogus"}}, InvalidParameterError, r"bound must be one of"),
        ({"epsilon": 1.0, "options": []}, ParameterTypeError, r"options must be a dict"),
        ({"epsilon": 1.0, "device": "tpu"}, InvalidParameterError, r"device must be 'cpu', 'cuda' or 'cuda:N'"),
        ({"epsilon": 1.0, "model": ""}, InvalidParameterError, r"model must be a non-empty str"),
        ({"epsilon": 1.0, "keep_original": "yes"}, ParameterTypeError, r"keep_original must be True or False"),
    ],
    ids=[
        "eps-zero",
        "eps-negative",
        "eps-nan",
        "eps-inf",
        "eps-neg-inf",
        "eps-bool",
        "eps-str",
        "unknown-mechanism",
        "unknown-postprocess",
        "delta-zero",
        "delta-one",
        "delta-for-pure-mechanism",
        "unknown-option",
        "bad-bound",
        "options-not-dict",
        "bad-device",
        "empty-model",
        "keep-original-not-bool",
    ],
)
def test_invalid_config_raises(kwargs, exc, match):
    with pytest.raises(exc, match=match) as info:
        PrivatizerConfig(**kwargs)
    assert isinstance(info.value, HfTextDPError)
    assert isinstance(info.value, ValueError)


def test_positional_arguments_are_refused():
    with pytest.raises(TypeError):
        PrivatizerConfig(1.0)  # type: ignore[misc]


def test_valid_config_and_defaults():
    cfg = PrivatizerConfig(epsilon=100)
    assert cfg.epsilon == 100.0 and isinstance(cfg.epsilon, float)
    assert cfg.mechanism == "madlib" and cfg.postprocess == "nearest"
    assert cfg.model == "sentence-transformers/all-MiniLM-L6-v2"
    assert cfg.delta is None and cfg.options == {} and cfg.device == "cpu" and cfg.keep_original is False


def test_infinite_epsilon_only_in_test_mode():
    cfg = PrivatizerConfig(epsilon=math.inf, options={"test_mode": True})
    assert math.isinf(cfg.epsilon)


def test_config_is_frozen():
    cfg = PrivatizerConfig(epsilon=1.0)
    with pytest.raises(AttributeError):
        cfg.epsilon = 2.0  # type: ignore[misc]


def test_save_and_load_round_trip(tmp_path):
    cfg = PrivatizerConfig(epsilon=42.5, model="some/model", options={"bound": "none"}, keep_original=True)
    path = cfg.save_pretrained(tmp_path)
    assert path.name == "privatizer_config.json"
    text = path.read_text()
    data = json.loads(text)
    assert list(data) == sorted(data), "keys must be sorted"
    assert "seed" not in text
    assert PrivatizerConfig.from_pretrained(tmp_path) == cfg
    assert PrivatizerConfig.from_pretrained(path) == cfg
    assert cfg.to_dict()["epsilon"] == 42.5


def test_unknown_keys_strict_and_lenient(tmp_path):
    (tmp_path / "privatizer_config.json").write_text(json.dumps({"epsilon": 3.0, "colour": "red"}))
    with pytest.raises(UnknownOptionError, match=r"unknown config keys \['colour'\]"):
        PrivatizerConfig.from_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="colour"):
        cfg = PrivatizerConfig.from_pretrained(tmp_path, strict=False)
    assert cfg.epsilon == 3.0


def test_from_pretrained_missing_repo_is_clear(tmp_path):
    with pytest.raises(HfTextDPError, match="no privatizer_config.json"):
        PrivatizerConfig.from_pretrained("nobody/no-such-config-repo")


def test_sensitive_is_parsed_once_and_written_back(monkeypatch):
    """Issue 55 item 3: the config holds the parsed spec; reading it never parses again; to_dict writes its JSON."""
    import hf_textdp.config as config_module
    from hf_textdp.sensitive import SensitiveSpec, parse_sensitive

    calls = []
    monkeypatch.setattr(config_module, "parse_sensitive", lambda v: calls.append(v) or parse_sensitive(v))
    cfg = PrivatizerConfig(epsilon=2.0, sensitive={"epsilon": 1, "detectors": ["card"]})
    assert isinstance(cfg.sensitive, SensitiveSpec) and cfg.sensitive.epsilon == 1.0
    for _ in range(3):
        assert cfg.sensitive_spec is cfg.sensitive and cfg.sensitive.others == "privatize"
    assert len(calls) == 1
    value = cfg.to_dict()["sensitive"]
    assert value == {"epsilon": 1.0, "detectors": ["card"], "others": "privatize"}
    assert PrivatizerConfig(**cfg.to_dict()) == cfg
    assert PrivatizerConfig(epsilon=2.0, sensitive=cfg.sensitive) == cfg  # a spec is accepted as it is
