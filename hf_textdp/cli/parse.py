"""Parsed arguments to values: ``-o KEY=VALUE`` options, the ``PrivatizerConfig`` of ``--config`` and the flags over
it, the candidate setting, and the seed of ``--seed``/``--seed-file`` (never echoed)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidParameterError
from .catalog import DEFAULT_CANDIDATES


if TYPE_CHECKING:
    from ..config import PrivatizerConfig


__all__ = [
    "parse_value",
    "parse_options",
    "read_seed",
    "config_from_args",
    "candidates_from_args",
    "sensitive_from_args",
]


def parse_value(text: str) -> Any:
    """``-o KEY=VALUE``: VALUE is JSON when it parses (numbers, true/false, null, lists), else a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_options(pairs: Sequence[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in pairs or []:
        if "=" not in item:
            raise InvalidParameterError(f"-o/--option expects KEY=VALUE, got {item!r}.")
        key, value = item.split("=", 1)
        out[key.strip()] = parse_value(value)
    return out


def read_seed(args: argparse.Namespace) -> int | None:
    """``--seed`` or ``--seed-file`` (the commands without ``--seed-file`` too), decimal or 0x hex; never echoed."""
    seed_file = getattr(args, "seed_file", None)
    if args.seed is not None and seed_file is not None:
        raise InvalidParameterError("--seed and --seed-file are mutually exclusive; give one of them.")
    if seed_file is not None:
        try:  # never decoded with the error's message: it would quote a byte of the secret
            return int(Path(seed_file).read_bytes().decode("ascii").strip(), 0)
        except ValueError:  # UnicodeDecodeError included
            raise InvalidParameterError("--seed-file must hold one integer (decimal or 0x hex).") from None
    if args.seed is not None:
        try:
            return int(args.seed, 0)
        except ValueError:
            raise InvalidParameterError("--seed must be an integer (decimal or 0x hex).") from None
    return None


def config_from_args(args: argparse.Namespace) -> PrivatizerConfig:
    from ..config import PrivatizerConfig  # torch and transformers: not on --help's path

    base: dict[str, Any] = {}
    if getattr(args, "config", None):
        base = PrivatizerConfig.from_pretrained(args.config).to_dict()
    for key in ("mechanism", "model", "postprocess", "delta", "device"):
        value = getattr(args, key, None)
        if value is not None:
            base[key] = value
    if getattr(args, "epsilon", None) is not None:
        base["epsilon"] = args.epsilon
    if "epsilon" not in base:
        raise InvalidParameterError("--epsilon is required (or a --config that holds one).")
    opts = dict(base.get("options") or {})
    opts.update(parse_options(getattr(args, "option", None)))
    base["options"] = opts
    if getattr(args, "keep_original", False):
        base["keep_original"] = True
    base["candidates"] = candidates_from_args(args, base.get("candidates", DEFAULT_CANDIDATES))
    base["sensitive"] = sensitive_from_args(args, base.get("sensitive"))
    base["user"] = user_from_args(args, base.get("user"))
    return PrivatizerConfig(**base)


def user_from_args(args: argparse.Namespace, base: dict[str, Any] | None) -> dict[str, Any] | None:
    """``--user-column``, ``--user-budget``, ``--user-bound``, ``--user-max-rows`` and ``--user-keep-column`` over
    the config's ``user`` setting (docs/mechanisms/users.md); ``PrivatizerConfig`` validates the result."""
    flags = {
        "column": getattr(args, "user_column", None),
        "budget": getattr(args, "user_budget", None),
        "bound": getattr(args, "user_bound", None),
        "max_rows": getattr(args, "user_max_rows", None),
        "keep_column": getattr(args, "user_keep_column", None) or None,
    }
    given = {k: v for k, v in flags.items() if v is not None}
    if not given:
        return base
    out = {**(base or {}), **given}
    if "column" not in out:
        raise InvalidParameterError(
            "--user-column is required with --user-budget, --user-bound, --user-max-rows or --user-keep-column (or a "
            "--config whose user setting names a column)."
        )
    return out


def sensitive_from_args(args: argparse.Namespace, base: dict[str, Any] | None) -> dict[str, Any] | None:
    """``--sensitive-epsilon``, ``--sensitive-detectors``, ``--sensitive-column`` and ``--others`` over the config's
    ``sensitive`` setting (docs/mechanisms/selective.md); ``PrivatizerConfig`` validates the result."""
    keys = ("sensitive_epsilon", "sensitive_detectors", "sensitive_column", "others", "sensitive_consistent")
    eps, detectors, column, others, consistent = (getattr(args, k, None) for k in keys)
    if eps is None and detectors is None and column is None and others is None and consistent is None:
        return base
    out = dict(base or {})
    if eps is None and "epsilon" not in out:
        raise InvalidParameterError(
            "--sensitive-epsilon is required with --sensitive-detectors, --sensitive-column, --others or "
            "--sensitive-consistent (or a "
            "--config whose sensitive setting holds an epsilon)."
        )
    if eps is not None:
        out["epsilon"] = eps
    if detectors is not None:
        names = [d.strip() for d in detectors.split(",") if d.strip()]
        out["detectors"] = "default" if names == ["default"] else [] if names == ["none"] else names
    if column is not None:
        out["column"] = column
    if others is not None:
        out["others"] = others
    if consistent is not None:
        out["consistent"] = consistent
    return out


def candidates_from_args(args: argparse.Namespace, base: Any) -> Any:
    """``--candidates``, ``--candidate-scripts`` and ``--candidate-vocab`` over the config's setting."""
    keys = ("candidates", "candidate_scripts", "candidate_vocab", "candidate_classes")
    cand_set, scripts, vocab, classes = (getattr(args, k, None) for k in keys)
    if cand_set is None and scripts is None and vocab is None and classes is None:
        return base
    from ..candidates import parse_candidates  # numpy: not on --help's path

    spec = parse_candidates(base)
    return {
        "set": cand_set or ("public_vocab" if vocab is not None else spec.set),
        "scripts": [s.strip() for s in scripts.split(",") if s.strip()] if scripts is not None else spec.scripts,
        "vocab": vocab if vocab is not None else spec.vocab,
        "classes": classes or spec.classes,
    }
