"""What an informed adversary recovers from a privatized corpus (docs/attacks.md).

Three attacks on each candidate token, by an adversary who knows the mechanism, its parameters, the
public embedding matrix and a public corpus, but not the key: the identity guess, Bayes inversion
with the mechanism's law and a public prior, and a contextual model trained on public text the
adversary privatized. ``hf-textdp attack`` and the recipes ``recipes/attacks_*.yaml`` run them.
"""

from __future__ import annotations

from .run import ATTACKS, AttackSettings, run_attack


__all__ = ["ATTACKS", "AttackSettings", "run_attack"]
