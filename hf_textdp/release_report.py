"""The sections of the privacy report that the release engine fills (accounting.md §3): each piece class's size,
scale and claim, the sensitive class's section (selective.md §6), and the attack table's measured recovery for a
configuration (:mod:`hf_textdp.io.attack_table`, keyed by :func:`config_key`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .accounting import Claim
from .config import PrivatizerConfig
from .io.attack_table import lookup
from .io.models import resolved_candidates
from .mechanisms.base import Mechanism
from .scale import scale_stats
from .sensitive import SensitiveSpec, selection_info
from .space import ClassPart


__all__ = ["class_sections", "config_key", "measured_recovery", "sensitive_section"]


def class_sections(
    releases: Sequence[tuple[ClassPart, Mechanism, Claim]], marker: str | None
) -> list[dict[str, Any]] | None:
    """Each released class's size, diameter and claim (the report's ``candidate_set.per_class``); ``None`` for
    one space."""
    if len(releases) < 2:
        return None
    out = []
    for part, mech, claim in releases:
        stats = scale_stats(mech.scale_metric_matrix(part.space), store=part.space.store)
        out.append(
            {
                "name": part.name,
                "marker": marker,
                "size": part.space.V,
                "median_rho1": stats.median_rho1,
                "diam": stats.diam,
                "epsilon_token": claim.epsilon_token,
                "delta_token": claim.delta_token if claim.epsilon_token is not None else None,
                "certified": claim.certified,
                "details": mech.details(part.space),
            }
        )
    return out


def sensitive_section(
    spec: SensitiveSpec,
    claim: Claim,
    per_class: Sequence[tuple[str, Claim]],
    epsilon: float,
    others_claim: Claim | None,
) -> dict[str, Any]:
    """The report's ``sensitive`` section (selective.md §6): the sensitive class's ε and claim (and each piece
    class's, where there are several), what the others get, and what the selection reveals
    (:func:`~hf_textdp.sensitive.selection_info`)."""
    classes = None
    if len(per_class) > 1:
        classes = [{"name": name, "epsilon_token": c.epsilon_token} for name, c in per_class]
    return {
        "epsilon": spec.epsilon,
        "epsilon_token": claim.epsilon_token,
        "delta_token": claim.delta_token if claim.epsilon_token is not None else None,
        "certified": claim.certified,
        "others": spec.others,
        "others_epsilon": epsilon if spec.others == "privatize" else None,
        "others_epsilon_token": others_claim.epsilon_token if spec.others == "privatize" and others_claim else None,
        "per_class": classes,
        **selection_info(spec),
    }


def config_key(config: PrivatizerConfig) -> str:
    """The attack table's key of a configuration: everything that sets the release's law, as canonical JSON
    (the mechanism's parameters with their defaults filled in, so an option left at its default matches; the
    candidate set with its scripts resolved from the model's language, as the space is built)."""
    mech, _ = config.build()
    return json.dumps(
        {
            "model": config.model,
            "mechanism": config.mechanism,
            "parameters": mech.parameters(),
            "postprocess": config.postprocess if mech.kind == "additive" else "none",
            "candidates": resolved_candidates(config.model, config.candidates).to_value(),
        },
        sort_keys=True,
    )


def measured_recovery(config: PrivatizerConfig) -> dict[str, Any] | None:
    """The attack table's entry for ``config`` (without its key), or ``None`` when it was not measured."""
    return lookup(config_key(config))
