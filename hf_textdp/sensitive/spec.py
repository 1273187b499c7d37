"""The ``sensitive=`` setting of selective privatization, validated (docs/mechanisms/selective.md §2).

``{"epsilon": ε_s, "detectors": [...] | "default", "column": name, "labels": [...], "others": "privatize" | "keep",
"render": "token" | "placeholder", "consistent": "row" | "user"}``: ``epsilon`` (required) is the per-token ε of
sensitive positions; ``detectors`` name what finds them (:data:`BUILTIN_DETECTORS`, ``"name"``, ``"rare"`` or
``"rare:ZIPF"``, ``"spacy:NAME"``, ``"presidio"``), ``"default"`` (or no ``detectors`` key) the default set
(:mod:`.defaults`), ``[]`` none (the span column alone); ``column`` names a column of character spans
``[[start, end], ...]`` per row; ``labels`` are the entity labels a spaCy detector keeps; ``others`` says whether
the other positions are privatized at the config's ε or released unchanged; ``render`` whether each sensitive word
is released as privatized tokens or as one placeholder; ``consistent`` (``"row"`` or ``"user"``) releases every
occurrence of one sensitive string in a row (or of one user) as one draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..errors import InvalidParameterError, ParameterTypeError
from ..validation import check_choice, check_float


__all__ = [
    "SensitiveSpec",
    "parse_sensitive",
    "BUILTIN_DETECTORS",
    "DEFAULT_SPACY_LABELS",
    "OTHERS",
    "SPEC_KEYS",
    "RENDER",
    "DEFAULT",
]

BUILTIN_DETECTORS = (
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
DEFAULT_SPACY_LABELS = ("PERSON", "GPE", "LOC", "ORG", "FAC")  # dates: the date rule; NORP: see selective.md
OTHERS = ("privatize", "keep")
RENDER = ("token", "placeholder")
SPEC_KEYS = ("epsilon", "detectors", "column", "labels", "others", "render", "consistent")
DEFAULT: Literal["default"] = "default"
#: consistent pseudonyms (docs/mechanisms/selective.md §8): one draw per distinct sensitive string per row or user
CONSISTENT = (None, "row", "user")

Others = Literal["privatize", "keep"]
Render = Literal["token", "placeholder"]


@dataclass(frozen=True, kw_only=True)
class SensitiveSpec:
    """A validated ``sensitive=`` setting.

    Args:
        epsilon (`float`): per-token ε of sensitive positions (finite, > 0).
        detectors (`tuple[str, ...]` or `"default"`): detector names, in the order given, without repeats, or
            ``"default"``: the default set, resolved where the detectors run (:func:`.defaults.resolve_detectors`).
        column (`str`, *optional*): the column of character spans supplied by the user.
        labels (`tuple[str, ...]`): entity labels kept from spaCy detectors (:data:`DEFAULT_SPACY_LABELS`
            unless given).
        others (`str`, defaults to `"privatize"`): ``"privatize"`` (at the config's ε) or ``"keep"``
            (released unchanged, no ε).
        render (`str`, defaults to `"token"`): ``"token"`` (each sensitive position's privatized token) or
            ``"placeholder"`` (each sensitive word as one placeholder).
    """

    epsilon: float
    detectors: tuple[str, ...] | Literal["default"] = DEFAULT
    column: str | None = None
    labels: tuple[str, ...] = DEFAULT_SPACY_LABELS
    others: Others = "privatize"
    render: Render = "token"
    consistent: Literal["row", "user"] | None = None

    @property
    def is_default(self) -> bool:
        return self.detectors == DEFAULT

    def named(self) -> tuple[str, ...]:
        """The detectors named explicitly (none for the default set)."""
        return () if isinstance(self.detectors, str) else self.detectors

    def to_value(self) -> dict[str, Any]:
        """The JSON form (what a config stores); :func:`parse_sensitive` reads it back to an equal spec."""
        out: dict[str, Any] = {
            "epsilon": self.epsilon,
            "detectors": self.detectors if isinstance(self.detectors, str) else list(self.detectors),
            "others": self.others,
        }
        if self.column is not None:
            out["column"] = self.column
        if self.is_default or any(d.startswith("spacy:") for d in self.named()):
            out["labels"] = list(self.labels)
        if self.render != "token":
            out["render"] = self.render
        if self.consistent is not None:
            out["consistent"] = self.consistent
        return out


def _name(key: str) -> str:
    return f'sensitive["{key}"]'


def _str_list(value: Any, key: str) -> list[str]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        what = "a list of str or 'default'" if key == "detectors" else "a list of str"
        raise ParameterTypeError(f"{_name(key)} must be {what}, got {type(value).__name__} ({value!r}).")
    bad = [v for v in value if not isinstance(v, str) or not v.strip()]
    if bad:
        raise InvalidParameterError(f"{_name(key)} must hold non-empty str, got {bad[0]!r}.")
    return list(value)


def _detector(name: str) -> str:
    if name in BUILTIN_DETECTORS or name in ("presidio", "rare", "name"):
        return name
    if name.startswith("rare:"):
        try:
            zipf = float(name[len("rare:") :])
        except ValueError:
            zipf = float("nan")
        if not 0.0 < zipf < 8.0:
            raise InvalidParameterError(
                f'{_name("detectors")}: {name!r}: write "rare:ZIPF" with a Zipf frequency threshold in (0, 8), '
                'such as "rare:2" (words rarer than 10**(ZIPF - 9) of running English text are selected).'
            )
        return name
    if name.startswith("spacy:"):
        if not name[len("spacy:") :].strip():
            raise InvalidParameterError(
                f'{_name("detectors")}: {name!r} names no spaCy pipeline; write "spacy:NAME" with a pipeline '
                'name or path, such as "spacy:en_core_web_sm".'
            )
        return name
    allowed = [*BUILTIN_DETECTORS, "name", "rare", "rare:ZIPF", "spacy:NAME", "presidio"]
    raise InvalidParameterError(f"{_name('detectors')}: unknown detector {name!r}. Allowed: {allowed}.")


def parse_sensitive(value: Any) -> SensitiveSpec:
    """Validate a ``sensitive=`` dict (or a :class:`SensitiveSpec`) into a :class:`SensitiveSpec`.

    Raises:
        ParameterTypeError: the setting or one of its entries has the wrong type.
        InvalidParameterError: a missing or unknown key, an ε that is not finite and > 0, an unknown or repeated
            detector, ``labels`` without a spaCy detector, or neither detectors nor a column.

    Example:

    >>> parse_sensitive({"epsilon": 1.0, "detectors": ["email", "card"]}).others
    'privatize'
    >>> parse_sensitive({"detectors": ["email"]})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    hf_textdp.errors.InvalidParameterError: sensitive["epsilon"] is required: ...
    """
    if isinstance(value, SensitiveSpec):
        return value
    if not isinstance(value, dict):
        raise ParameterTypeError(
            f"sensitive must be a dict such as {{'epsilon': 1.0, 'detectors': ['email']}} or None, "
            f"got {type(value).__name__}."
        )
    extra = sorted(str(k) for k in value if k not in SPEC_KEYS)
    if extra:
        raise InvalidParameterError(f"sensitive: unknown keys {extra}; allowed keys: {sorted(SPEC_KEYS)}.")
    if "epsilon" not in value:
        raise InvalidParameterError(
            f"{_name('epsilon')} is required: the per-token ε of sensitive positions (a finite float > 0)."
        )
    epsilon = check_float(value["epsilon"], _name("epsilon"), minimum=0.0)
    detectors = _detectors(value.get("detectors", DEFAULT))
    column = value.get("column")
    if column is not None and (not isinstance(column, str) or not column):
        raise InvalidParameterError(f"{_name('column')} must be a non-empty str (a column name), got {column!r}.")
    if not detectors and column is None:
        raise InvalidParameterError(
            f"sensitive: nothing selects sensitive positions; give {_name('detectors')} (such as ['email', 'card'] "
            f"or 'default') or {_name('column')} (a column of [[start, end], ...] character spans)."
        )
    spacy = detectors == DEFAULT or any(d.startswith("spacy:") for d in detectors)
    labels = _labels(value, spacy, detectors)
    others = check_choice(value.get("others", "privatize"), _name("others"), OTHERS)
    render = check_choice(value.get("render", "token"), _name("render"), RENDER)
    consistent = check_choice(value.get("consistent"), _name("consistent"), CONSISTENT)
    return SensitiveSpec(
        epsilon=epsilon,
        detectors=detectors,
        column=column,
        labels=labels,
        others=others,
        render=render,
        consistent=consistent,
    )


def _detectors(value: Any) -> tuple[str, ...] | Literal["default"]:
    """``"default"`` or the validated names, without repeats."""
    if value == DEFAULT:
        return DEFAULT
    detectors = [_detector(d) for d in _str_list(value, "detectors")]
    repeated = sorted({d for d in detectors if detectors.count(d) > 1})
    if repeated:
        raise InvalidParameterError(f"{_name('detectors')}: {repeated} named more than once.")
    return tuple(detectors)


def _labels(value: dict[str, Any], spacy: bool, detectors: Any) -> tuple[str, ...]:
    if "labels" not in value:
        return DEFAULT_SPACY_LABELS
    if not spacy:
        raise InvalidParameterError(
            f"{_name('labels')} sets the entity labels of spaCy detectors, but {_name('detectors')} names none "
            f"({list(detectors)})."
        )
    labels = tuple(dict.fromkeys(_str_list(value["labels"], "labels")))
    if not labels:
        raise InvalidParameterError(f"{_name('labels')} must name at least one entity label, got [].")
    return labels
