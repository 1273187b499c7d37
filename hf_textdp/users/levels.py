"""The release at each level of per-person scaling (docs/mechanisms/users.md §3): one release engine per level
used, built on demand and kept, each the configured release at ε·λ_j (and ε_s·λ_j) under the same key.

Duck-typed on :class:`~hf_textdp.release.ReleaseEngine` (this layer sits below it): an engine of a level is
``type(engine)(config, seed, split, stream)`` with the config's ε scaled.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import InvalidParameterError
from .allocation import level_scale


__all__ = ["LevelEngines", "scaled_config"]


def scaled_config(config: Any, factor: float) -> Any:
    """``config`` (a :class:`~hf_textdp.PrivatizerConfig`) with ε and ``sensitive["epsilon"]`` times ``factor``."""
    sens = config.sensitive
    return dataclasses.replace(
        config,
        epsilon=config.epsilon * factor,
        sensitive=None if sens is None else dataclasses.replace(sens, epsilon=sens.epsilon * factor),
    )


class LevelEngines:
    """The engines of the levels of one release: level 0 is the release itself.

    An engine of a level above 0 never goes through the GPU release service (it releases at the configured ε
    only): in a service worker, it releases on the worker's CPU.
    """

    def __init__(self, engine: Any) -> None:
        self.base = engine
        self._engines: dict[int, Any] = {0: engine}

    def at(self, level: int) -> Any:
        """The engine of ``level`` (built once)."""
        if level not in self._engines:
            base = self.base
            engine = type(base)(scaled_config(base.config, level_scale(level)), base.seed, base.split, base.stream)
            engine.remote_ok = False
            self._engines[level] = engine
        return self._engines[level]

    def token_bounds(self, level: int) -> tuple[float, float]:
        """(ε_tok of sensitive positions, ε_tok of the others) at ``level``; 0 for sensitive without ``sensitive``.

        Raises:
            InvalidParameterError: a claim that bounds no row (no finite ε_tok, or an uncertified calibration): a
                budget has nothing to bound.
        """
        engine = self.at(level)
        sens, other = engine.sensitive_claim, engine.claim
        for claim in (sens, other):
            if claim is not None and (claim.epsilon_token is None or not claim.rows_bounded):
                raise InvalidParameterError(
                    f"user['budget']: mechanism {engine.config.mechanism!r} gives no per-row bound here (dp_epsilon "
                    "is null: no finite ε_tok, or an uncertified calibration), so a budget has nothing to bound."
                )
        return (0.0 if sens is None else float(sens.epsilon_token), float(other.epsilon_token))
