"""What the adversary of :func:`~.run.run_attack` does (:class:`AttackSettings`) and the keys of its own
privatizations of public text (never a victim's key)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ...config import PrivatizerConfig
from ...privatizer import Privatizer
from .inversion import InversionBudget


__all__ = ["AttackSettings", "attacker"]

# Keys of the attacker's own privatizations (public data only): distinct from any victim key.
STATS_SPLIT, TRAIN_SPLIT = "attack-public-stats", "attack-public-train"
HOLDOUT_SPLIT, INVERSION_SPLIT = "attack-public-holdout", "attack-public-inversion"


@dataclass(frozen=True)
class AttackSettings:
    """What the adversary does (docs/attacks.md §1–§4).

    Attributes:
        top_k (`int`): inputs kept per released token by the Bayes attack (the contextual attack's list).
        prior_alpha (`float`): add-α smoothing of the public frequencies.
        taus (`tuple[float, ...]`): weights of the prior the attacker tries on their own privatized public
            rows, keeping the best (τ = 0 is maximum likelihood, τ = 1 the plain posterior).
        lambda_rho (`tuple[float, ...]`): the fitted law's grid of λ·ρ (fitted.py), tried the same way.
        neighbours (`int`): the fitted law's neighbourhood: inputs considered per released token.
        contextual (`bool`): train and run the contextual attack.
        train_rows (`int`): public rows the attacker privatizes to choose τ and λ and to train the
            contextual model on (the other half of the public corpus gives the prior and the bigram model).
        window (`int`), rank (`int`), epochs (`int`): the contextual model (contextual.py).
        bootstrap (`int`): row-bootstrap resamples of the 95 % intervals.
        min_count (`int`): input types seen fewer times are left out of the N_w / S_w means.
        holdout_rows (`int`): public rows (out of the training half) the attacker privatizes and keeps out of
            every fit, to choose the headline attack per group of tokens (never the private rows).
        content_top (`int`): replaced inputs outside this many most frequent public tokens are content tokens.
        inversion (`bool`): train and run the inversion attack (inversion.py).
        inversion_rows, inversion_epochs, inversion_max_length, inversion_lr, inversion_batch,
        inversion_max_minutes, inversion_bf16: its budget (:class:`~.inversion.InversionBudget`);
        inversion_check_every, inversion_patience: its convergence rule (blocks of steps, blocks without a 1 %
        gain before it stops).
        inversion_pool (`tuple[float, ...]`): train one model on pairs pooled over these ε of the family (the
            release's ε among them), ε given as an input; reused for every ε of the pool.
        inversion_cache (`bool`): keep each trained inversion model in the cache folder
            (``<HF_TEXTDP_CACHE>/attacks/inversion/``), keyed by everything it was trained on (public rows,
            configuration less ε, pool, budget, attacker key, space, versions), and reuse it in a later run.
        attacker_seed (`int`): the attacker's own key and the bootstrap seed.
        stats_rows (`int`, *optional*): at most this many public rows give the prior and the bigram model
            (default: half of the public corpus).
    """

    top_k: int = 10
    prior_alpha: float = 0.5
    contextual: bool = True
    train_rows: int = 8000
    window: int = 3
    rank: int = 32
    epochs: int = 4
    bootstrap: int = 1000
    min_count: int = 5
    taus: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    lambda_rho: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
    neighbours: int = 50
    holdout_rows: int = 500
    content_top: int = 100
    inversion: bool = False
    inversion_rows: int = 4000
    inversion_epochs: int = 4
    inversion_max_length: int = 64
    inversion_lr: float = 1e-4
    inversion_batch: int = 32
    inversion_max_minutes: float | None = None
    inversion_bf16: bool = False
    inversion_check_every: int = 25
    inversion_patience: int = 3
    inversion_pool: tuple[float, ...] = ()
    inversion_cache: bool = True
    attacker_seed: int = 2**40 + 2222
    stats_rows: int | None = None

    @classmethod
    def sized(cls, n_private_rows: int, **kwargs: Any) -> AttackSettings:
        """Settings whose public work grows with the private rows (``hf-textdp attack`` on a user's file).

        Training ``min(8000, max(200, 8·n))`` rows, held out ``min(500, max(100, 2·n))``, statistics
        ``max(2000, 40·n)`` rows: for n ≥ 1,000 private rows these are the defaults of the recipes.
        """
        n = max(1, int(n_private_rows))
        return cls(
            train_rows=min(8000, max(200, 8 * n)),
            holdout_rows=min(500, max(100, 2 * n)),
            stats_rows=max(2000, 40 * n),
            **kwargs,
        )

    def budget(self) -> InversionBudget:
        return InversionBudget(
            rows=self.inversion_rows,
            epochs=self.inversion_epochs,
            max_length=self.inversion_max_length,
            lr=self.inversion_lr,
            batch_rows=self.inversion_batch,
            max_minutes=self.inversion_max_minutes,
            bf16=self.inversion_bf16,
            check_every=self.inversion_check_every,
            patience=self.inversion_patience,
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("attacker_seed")
        if out["stats_rows"] is None:  # the recipes' records keep their keys
            out.pop("stats_rows")
        return out


def attacker(config: PrivatizerConfig, settings: AttackSettings, split: str) -> Privatizer:
    """The attacker's own privatizer of public rows under its key ``(attacker_seed, split)``."""
    return Privatizer(config, seed=settings.attacker_seed, split=split, allow_weak_seed=True)
