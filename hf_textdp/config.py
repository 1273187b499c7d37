"""``PrivatizerConfig``: what to privatize with, validated at construction.

The config holds no seed: a seed is a secret key and is never saved (decision D3).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from huggingface_hub import hf_hub_download

from .candidates import DEFAULT_CANDIDATES, CandidateSpec, parse_candidates
from .errors import InvalidParameterError, ModelNotFoundError, ParameterTypeError, UnknownOptionError
from .io.files import atomic_write_text, dumps_json
from .io.frequencies import resolve_count_options
from .io.models import network_allowed
from .mechanisms import get_mechanism_class
from .mechanisms.base import AdditiveMechanism, Mechanism
from .postprocess import PostprocessStep, get_postprocess_class, postprocess_option_names
from .sensitive import SensitiveSpec, parse_sensitive
from .space import DEFAULT_MODEL, parse_device
from .tokens import PASSTHROUGH_MODES
from .users import UserSpec, check_user_setting
from .validation import check_bool, check_choice, check_epsilon, check_sensitive_epsilon
from .version import __version__


__all__ = ["PrivatizerConfig", "CONFIG_NAME"]

CONFIG_NAME = "privatizer_config.json"
_GLOBAL_OPTIONS = ("test_mode",)


@dataclass(frozen=True, kw_only=True)
class PrivatizerConfig:
    """How to privatize: mechanism, ε, model, post-processing and options.

    Args:
        epsilon (`float`): the mechanism's ε (per token; per unit of distance for metric-DP mechanisms).
        mechanism (`str`, defaults to `"madlib"`): a registered mechanism name.
        delta (`float`, *optional*): δ ∈ (0, 1) for mechanisms that use one (``None``: their default).
        model (`str`, defaults to `"sentence-transformers/all-MiniLM-L6-v2"`): hub id, local folder,
            or a GloVe/word2vec text file.
        postprocess (`str`, defaults to `"nearest"`): post-processing step (postprocess.md).
        options (`dict`, defaults to `{}`): mechanism and post-processing options (docs/mechanisms/);
            ``{"test_mode": True}`` allows ε = ∞ (no noise) for tests.
        device (`str`, defaults to `"cpu"`): ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        keep_original (`bool`, defaults to `False`): keep the input text in ``{text_column}_original``.
        candidates (`str` or `dict`, defaults to `"no_reserved"`): which tokens may be emitted (space.md §6):
            ``"all"``, ``"no_reserved"`` (without placeholder rows such as ``[unusedN]``), or a dict
            ``{"set": "all" | "no_reserved" | "public_vocab", "scripts": ["latin", ...], "vocab": path}``.
            An input token outside the set is still privatized, as its nearest candidate (space.md §6.5).
        passthrough (`str`, defaults to `"placeholder"`): how a word missing from a static vector file is
            released: ``"placeholder"`` (as ``<unk>``) or ``"keep"`` (verbatim, unprotected); either way it is
            counted as ``passthrough_tokens``. A Hugging Face tokenizer's unknown token is always released as
            itself (``[UNK]``).
        sensitive (`dict`, *optional*): selective privatization (docs/mechanisms/selective.md):
            ``{"epsilon": ε_s, "detectors": [...], "column": name, "others": "privatize" | "keep"}``; detected or
            given positions are released by the same mechanism at ``ε_s``, the others at ``epsilon`` (or unchanged
            with ``"others": "keep"``); ``"consistent": "row" | "user"`` releases each distinct sensitive string once
            per row or user (selective.md §8). Parsed once at construction: the field holds the
            :class:`~hf_textdp.sensitive.SensitiveSpec` (a spec is accepted too), and :meth:`to_dict` writes its
            JSON form back.
        user (`dict`, *optional*): per-person accounting (docs/mechanisms/users.md): ``{"column": name, "budget": B,
            "bound": "scale" | "rows", "max_rows": k, "keep_column": False}``; each user's total ε is reported and,
            with a budget, held at or under ``B``. The user column is dropped from outputs unless ``keep_column``.
            Parsed once at construction, as ``sensitive`` is: the field holds the :class:`~hf_textdp.users.UserSpec`.

    Raises:
        InvalidParameterError: a value is not allowed (the message names it and what is allowed).

    Example:

    >>> cfg = PrivatizerConfig(mechanism="madlib", epsilon=100.0)
    >>> cfg.to_dict()["epsilon"]
    100.0
    >>> PrivatizerConfig(epsilon=-1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    hf_textdp.errors.InvalidParameterError: epsilon must be a finite float > 0 ..., got -1.
    """

    epsilon: float
    mechanism: str = "madlib"
    delta: float | None = None
    model: str = DEFAULT_MODEL
    postprocess: str = "nearest"
    options: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    keep_original: bool = False
    candidates: str | dict[str, Any] = DEFAULT_CANDIDATES
    passthrough: str = "placeholder"
    sensitive: SensitiveSpec | None = None  # a dict is accepted and parsed in __post_init__
    user: UserSpec | None = None  # a dict is accepted and parsed in __post_init__ (users.md §1)

    def __post_init__(self) -> None:
        if not isinstance(self.options, dict):
            raise ParameterTypeError(f"options must be a dict, got {type(self.options).__name__}.")
        object.__setattr__(self, "options", dict(self.options))
        test_mode = check_bool(self.options.get("test_mode", False), "options['test_mode']")
        eps = check_epsilon(self.epsilon, allow_inf=test_mode)
        object.__setattr__(self, "epsilon", eps)
        if self.delta is not None:
            if isinstance(self.delta, bool) or not isinstance(self.delta, (int, float)):
                raise ParameterTypeError(f"delta must be a float in (0, 1) or None, got {type(self.delta).__name__}.")
            if math.isnan(self.delta) or not 0 < self.delta < 1:
                raise InvalidParameterError(f"delta must be a float in (0, 1) or None, got {self.delta!r}.")
            object.__setattr__(self, "delta", float(self.delta))
        if not isinstance(self.model, str) or not self.model:
            raise InvalidParameterError(f"model must be a non-empty str, got {self.model!r}.")
        parse_device_name(self.device)
        check_bool(self.keep_original, "keep_original")
        check_choice(self.passthrough, "passthrough", PASSTHROUGH_MODES)
        object.__setattr__(self, "candidates", parse_candidates(self.candidates).to_value())
        if self.sensitive is not None:
            object.__setattr__(self, "sensitive", parse_sensitive(self.sensitive))
            check_sensitive_epsilon(self.sensitive.epsilon, self.epsilon, self.sensitive.others)
        object.__setattr__(self, "user", check_user_setting(self.user, self.sensitive))  # users.md §1
        self.build()  # validates the mechanism name, postprocess name and every option

    # ---------------------------------------------------------------- building
    @property
    def candidate_spec(self) -> CandidateSpec:
        """The validated candidate setting (space.md §6)."""
        return parse_candidates(self.candidates)

    @property
    def sensitive_spec(self) -> SensitiveSpec | None:
        """The parsed ``sensitive`` setting: the field itself (``None``: every candidate position at ``epsilon``),
        under the name callers written before the field held it parsed use."""
        return self.sensitive

    @property
    def user_spec(self) -> UserSpec | None:
        """The parsed ``user`` setting: the field itself (``None``: no per-person accounting)."""
        return self.user

    def sensitive_config(self) -> PrivatizerConfig:
        """The configuration sensitive positions are released with: this one at ``sensitive["epsilon"]``."""
        assert self.sensitive is not None
        return dataclasses.replace(self, epsilon=self.sensitive.epsilon, sensitive=None)

    def split_options(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Route ``options`` to (mechanism options, post-processing options); raise on unknown keys."""
        mech_cls = get_mechanism_class(self.mechanism)
        step_cls = get_postprocess_class(self.postprocess)
        mech_opts: dict[str, Any] = {}
        step_opts: dict[str, Any] = {}
        step_names = postprocess_option_names()
        unknown = []
        for key, value in self.options.items():
            if key in _GLOBAL_OPTIONS:
                continue
            if key in mech_cls.OPTIONS:
                mech_opts[key] = value
            elif key in step_cls.OPTIONS:
                step_opts[key] = value
            elif key in step_names:
                raise UnknownOptionError(
                    f"option {key!r} belongs to another post-processing step, not postprocess={self.postprocess!r} "
                    f"(its options: {sorted(step_cls.OPTIONS)})."
                )
            else:
                unknown.append(key)
        if unknown:
            allowed = sorted(set(mech_cls.OPTIONS) | set(step_cls.OPTIONS) | set(_GLOBAL_OPTIONS))
            raise UnknownOptionError(
                f"options {sorted(unknown)} are not accepted by mechanism {self.mechanism!r} with postprocess "
                f"{self.postprocess!r}. Allowed options: {allowed}."
            )
        return mech_opts, step_opts

    def build(self) -> tuple[Mechanism, PostprocessStep | None]:
        """Instantiate (and so validate) the mechanism and its post-processing step."""
        mech_cls = get_mechanism_class(self.mechanism)
        step_cls = get_postprocess_class(self.postprocess)
        if self.postprocess not in mech_cls.POSTPROCESS:
            raise InvalidParameterError(
                f"postprocess={self.postprocess!r} is not available for mechanism {self.mechanism!r}. "
                f"Allowed: {list(mech_cls.POSTPROCESS)}."
            )
        mech_opts, step_opts = self.split_options()
        mech = mech_cls(
            epsilon=self.epsilon,
            delta=self.delta,
            test_mode=bool(self.options.get("test_mode", False)),
            **resolve_count_options(mech_opts),
        )
        step = step_cls(**step_opts) if mech.kind == "additive" else None
        if step is not None and isinstance(mech, AdditiveMechanism):
            step.check_mechanism(mech)
        return mech, step

    # ---------------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the fields (JSON-ready; holds no seed; ``sensitive`` and ``user`` in their JSON forms)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.sensitive is not None:
            out["sensitive"] = self.sensitive.to_value()
        if self.user is not None:
            out["user"] = self.user.to_value()
        return out

    def to_json_string(self) -> str:
        return dumps_json(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, strict: bool = True) -> PrivatizerConfig:
        """Build from a dict; unknown keys raise (``strict=True``) or are dropped with a warning."""
        if not isinstance(data, dict):
            raise ParameterTypeError(f"config must be a JSON object, got {type(data).__name__}.")
        known = {f.name for f in fields(cls)}
        extra = sorted(set(data) - known - {"hf_textdp_version"})
        if extra:
            if strict:
                raise UnknownOptionError(
                    f"unknown config keys {extra}; allowed keys: {sorted(known)} (pass strict=False to ignore them)."
                )
            warnings.warn(f"PrivatizerConfig: ignoring unknown keys {extra}.", UserWarning, stacklevel=2)
        return cls(**{k: v for k, v in data.items() if k in known})

    def save_pretrained(self, save_directory: str | Path) -> Path:
        """Write ``privatizer_config.json`` (sorted keys) into ``save_directory``; returns its path."""
        path = Path(save_directory) / CONFIG_NAME
        data = self.to_dict()
        data["hf_textdp_version"] = __version__
        atomic_write_text(path, dumps_json(data))
        return path

    @classmethod
    def from_pretrained(
        cls, path_or_repo_id: str | Path, *, strict: bool = True, **hub_kwargs: Any
    ) -> PrivatizerConfig:
        """Load from a folder holding ``privatizer_config.json``, that file itself, or a hub repo id."""
        p = Path(path_or_repo_id).expanduser()
        if p.is_dir():
            p = p / CONFIG_NAME
        if not p.is_file():
            try:
                p = Path(
                    hf_hub_download(
                        str(path_or_repo_id),
                        CONFIG_NAME,
                        local_files_only=hub_kwargs.pop("local_files_only", not network_allowed()),
                        **hub_kwargs,
                    )
                )
            except Exception as err:  # noqa: BLE001
                raise ModelNotFoundError(
                    f"path_or_repo_id={str(path_or_repo_id)!r}: no {CONFIG_NAME} in that folder, and no such hub "
                    f"repo in the local cache ({type(err).__name__})."
                ) from err
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise InvalidParameterError(f"{p}: not valid JSON ({err.msg} at line {err.lineno}).") from err
        return cls.from_dict(data, strict=strict)


def parse_device_name(device: Any) -> None:
    if not isinstance(device, str) or not (device == "cpu" or device == "cuda" or device.startswith("cuda:")):
        raise InvalidParameterError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}.")
    if device.startswith("cuda:") and not device[5:].isdigit():
        raise InvalidParameterError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}.")


_ = parse_device  # re-exported for callers that need a torch.device

#: arguments users pass to ``PrivatizerConfig`` that belong to the object doing the work: where each goes
_ELSEWHERE = {
    "text_column": "Privatizer(config, text_column=...) or privatize_dataset(..., text_column=...) "
    "(CLI: --text-column)",
    "id_column": "Privatizer(config, id_column=...) or privatize_dataset(..., id_column=...) (CLI: --id-column)",
    "seed": "Privatizer(config, seed=...) or privatize_dataset(..., seed=...): a seed is a secret key, never part "
    "of a saved config",
    "allow_weak_seed": "Privatizer(config, allow_weak_seed=...) or privatize_dataset(..., allow_weak_seed=...)",
    "split": "Privatizer(config, split=...) or privatize_dataset(..., split=...)",
    "num_proc": "privatize_dataset(..., num_proc=...) or Dataset.map(..., num_proc=...)",
    "output_dir": "privatize_dataset(..., output_dir=...)",
}


def _refuse_unknown_arguments(init: Any) -> Any:
    """Wrap the dataclass ``__init__``: an argument it does not take is refused by a message naming where it goes
    (``text_column`` belongs to ``Privatizer``), or the arguments it takes, instead of Python's bare TypeError."""

    @functools.wraps(init)
    def __init__(self: PrivatizerConfig, *args: Any, **kwargs: Any) -> None:
        known = {f.name for f in fields(PrivatizerConfig)}
        for name in sorted(set(kwargs) - known):
            where = _ELSEWHERE.get(name)
            raise ParameterTypeError(
                f"PrivatizerConfig takes no argument {name}=; "
                + (f"pass it to {where}." if where else f"its arguments are {sorted(known)}.")
            )
        init(self, *args, **kwargs)

    return __init__


setattr(PrivatizerConfig, "__init__", _refuse_unknown_arguments(PrivatizerConfig.__init__))  # noqa: B010
