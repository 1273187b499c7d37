"""What the commands' ``--help`` says about the built-in mechanisms, post-processing steps and candidate settings,
without importing them: the mechanism modules import torch (1.5 CPU-s), ``candidates`` numpy. Each name here is
the registries' own (``tests/cli/test_catalog.py`` checks every entry against ``hf_textdp.mechanisms``,
``hf_textdp.postprocess``, ``hf_textdp.candidates`` and ``hf_textdp.space``); the commands still validate their
arguments against the registries when they run."""

from __future__ import annotations

from typing import Any, NamedTuple


__all__ = [
    "CANDIDATE_SETS",
    "CLASS_MODES",
    "DEFAULT_CANDIDATES",
    "DEFAULT_MODEL",
    "DETECTORS",
    "MECHANISMS",
    "POSTPROCESS",
    "SCRIPTS",
    "MechanismHelp",
]


class MechanismHelp(NamedTuple):
    """A mechanism class's attributes the help prints: ``OPTIONS``, ``POSTPROCESS``, ``USES_DELTA``,
    ``DEFAULT_DELTA``."""

    options: dict[str, Any]
    postprocess: tuple[str, ...]
    uses_delta: bool = False
    default_delta: float | None = None


_STEPS = ("nearest", "top2", "rank", "vector", "nearest_excluding_input")
_BOUNDED = {
    "bound": "clip",
    "clip_norm": None,
    "sensitivity": "bound",
    "match_space": "clipped",
    "jl_k": None,
    "jl_xi": None,
    "jl_seed": None,
}

#: name -> help attributes, in the registry's (sorted) order
MECHANISMS: dict[str, MechanismHelp] = {
    "dp_mlm": MechanismHelp(
        {"clip": [-3.2093127, 16.304797887802124], "context": "each", "batch_tokens": 8192, "clip_source": None},
        ("nearest",),
    ),
    "gaussian": MechanismHelp(_BOUNDED | {"calibration": "analytic"}, _STEPS, True, 1e-06),
    "laplace": MechanismHelp(_BOUNDED | {"calibration": "sound"}, _STEPS),
    "madlib": MechanismHelp({"bound": "none"}, _STEPS),
    "mahalanobis": MechanismHelp({"lam": 0.2}, _STEPS),
    "privemb": MechanismHelp(
        {"beta": 0.9, "m": None, "projection_seed": 0, "certify": True},
        ("nearest", "vector", "backproject"),
        True,
        1e-06,
    ),
    "santext": MechanismHelp({"chunk_size": 4096}, ("nearest",)),
    "santext_plus": MechanismHelp(
        {"p": 0.3, "w": 0.9, "frequencies": None, "frequency_corpus": None, "chunk_size": 4096}, ("nearest",)
    ),
    "tem": MechanismHelp({"beta": 0.001, "gamma": None, "sampler": "dense", "chunk_size": 4096}, ("nearest",)),
    "truncated_laplace": MechanismHelp(_BOUNDED | {"calibration": "sound"}, _STEPS, True, 1e-06),
}

#: the registered post-processing steps, sorted
POSTPROCESS = ("backproject", "nearest", "nearest_excluding_input", "rank", "top2", "vector")

CANDIDATE_SETS = ("all", "no_reserved", "public_vocab")
CLASS_MODES = ("preserve", "mix")
DEFAULT_CANDIDATES = "no_reserved"
SCRIPTS = (
    "latin",
    "greek",
    "cyrillic",
    "arabic",
    "hebrew",
    "devanagari",
    "han",
    "hiragana",
    "katakana",
    "hangul",
    "thai",
)
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
#: the built-in detectors of selective privatization (hf_textdp.sensitive.BUILTIN_DETECTORS)
DETECTORS = (
    "email",
    "url",
    "phone",
    "card",
    "ip",
    "number",
    "id",
    "iban",
    "handle",
    "address",
    "date",
    "context",
)
