"""One attack evaluation: release a private corpus, attack it three ways, score with intervals.

:func:`run_attack` is what ``hf-textdp attack`` and the attack recipes call (docs/attacks.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from ...config import PrivatizerConfig
from ...privatizer import Privatizer
from .bayes import ExactLaw, has_exact_law, log_prior, with_identity
from .contextual import BigramModel, ContextualAttack
from .corpus import ReleasedCorpus, release_corpus
from .fitted import FittedLaw
from .intervals import row_bootstrap


__all__ = ["AttackSettings", "run_attack", "ATTACKS"]

ATTACKS = ("identity", "bayes", "contextual")

# Keys of the attacker's own privatizations (public data only): distinct from any victim key.
_STATS_SPLIT, _TRAIN_SPLIT = "attack-public-stats", "attack-public-train"


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
        attacker_seed (`int`): the attacker's own key and the bootstrap seed.
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
    attacker_seed: int = 2**40 + 2222

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("attacker_seed")
        return out


def _split_public(texts: Sequence[str], train_rows: int, seed: int) -> tuple[list[str], list[str]]:
    """A seeded half of the public rows for statistics, the rest (at most ``train_rows``) for training."""
    order = np.random.default_rng(seed).permutation(len(texts))
    half = (len(texts) + 1) // 2
    stats = [texts[i] for i in np.sort(order[:half])]
    train = [texts[i] for i in np.sort(order[half:])[:train_rows]]
    return stats, train


def _score(hits: npt.NDArray[np.bool_], corpus: ReleasedCorpus, settings: AttackSettings, salt: int) -> dict[str, Any]:
    mean, lo, hi = row_bootstrap(hits, corpus.row_sizes, settings.bootstrap, settings.attacker_seed + salt)
    return {"value": mean, "ci95": [lo, hi]}


@lru_cache(maxsize=1)
def _diagnostics() -> Any:
    """The local ``privacy_diagnostics`` evaluate module (N_w, S_w), loaded once per process."""
    from ..common import Metrics

    return Metrics().diagnostics


def _attacker(config: PrivatizerConfig, settings: AttackSettings, split: str) -> Privatizer:
    return Privatizer(config, seed=settings.attacker_seed, split=split, allow_weak_seed=True)


def build_law(attacker: Privatizer, settings: AttackSettings) -> ExactLaw | FittedLaw:
    """The law the Bayes attack uses, read from the attacker's privatizer: exact (tem, santext) or fitted."""
    if has_exact_law(attacker.engine.mechanism):
        return ExactLaw(attacker)
    return FittedLaw(attacker, neighbours=settings.neighbours)


def tune(
    law: ExactLaw | FittedLaw, logp: npt.NDArray[np.float64], train: ReleasedCorpus | None, settings: AttackSettings
) -> tuple[int, float, dict[str, float]]:
    """The law's λ (grid index) and the prior's weight τ with the best top-1 on the attacker's privatized public rows.

    Without such rows: the law's first λ and τ = 1.
    """
    if train is None or train.inputs.size == 0:
        return 0, 1.0, {}
    ys = np.unique(train.released)
    found: dict[str, float] = {}
    best = (0, 1.0, -1.0)
    for lam in range(len(law.lambdas)):
        for tau in settings.taus:
            g, _ = law.lists(ys, logp, tau, 1, lam).for_tokens(train.released)
            score = float(np.mean(g[:, 0] == train.inputs))
            found[f"lambda={law.lambdas[lam]:.4g},tau={tau:g}"] = score
            if score > best[2]:
                best = (lam, tau, score)
    return best[0], best[1], found


def run_attack(
    config: PrivatizerConfig,
    private_texts: Sequence[str],
    public_texts: Sequence[str],
    *,
    seed: int | None = None,
    settings: AttackSettings | None = None,
    keep_texts: bool = False,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, Any], ReleasedCorpus]:
    """Release ``private_texts`` with ``config`` and measure what an informed adversary recovers.

    Args:
        config (`PrivatizerConfig`): the release under attack.
        private_texts (`list[str]`): the data released (its tokens are the truth to recover).
        public_texts (`list[str]`): the adversary's public corpus (never the private data).
        seed (`int`, *optional*): the release's key (default: fresh, as an unseeded release). The
            adversary never sees it; it is not recorded.
        settings (`AttackSettings`, *optional*): the adversary.
        keep_texts (`bool`): keep the released texts in the returned corpus (for a utility score).

    Returns:
        The record (``attacks`` holds identity, bayes and contextual: top-1 and top-5 recovery with
        row-bootstrap 95 % intervals; ``recovery_top1`` is the best attack's top-1), and the released
        corpus.
    """
    settings = settings or AttackSettings()
    say = progress or (lambda _m: None)
    timing: dict[str, float] = {}
    t = time.perf_counter()
    victim = Privatizer(config, seed=seed, allow_weak_seed=True)
    private = release_corpus(victim, private_texts, keep_texts=keep_texts)
    timing["release_private"] = time.perf_counter() - t
    V = int(victim.space.V)
    say(f"released {private.inputs.size:,} private tokens (replacement rate {private.replacement_rate():.3f})")

    t = time.perf_counter()
    stats_texts, train_texts = _split_public(list(public_texts), settings.train_rows, settings.attacker_seed)
    attacker = _attacker(config, settings, _STATS_SPLIT)
    stats = release_corpus(attacker, stats_texts)
    logp = log_prior(np.bincount(stats.inputs, minlength=V), settings.prior_alpha)
    train = release_corpus(_attacker(config, settings, _TRAIN_SPLIT), train_texts) if train_texts else None
    timing["release_public"] = time.perf_counter() - t

    t = time.perf_counter()
    wanted = private.released if train is None else np.concatenate([private.released, train.released])
    law = build_law(attacker, settings)
    law.prepare(wanted, settings.lambda_rho)
    lam, tau, tuning = tune(law, logp, train, settings)
    lists = law.lists(wanted, logp, tau, settings.top_k, lam)
    timing["bayes"] = time.perf_counter() - t
    say(
        f"bayes lists ({law.method} law, λ = {law.lambdas[lam]:.4g}, prior weight {tau:g}) "
        f"for {lists.released.size:,} released tokens"
    )

    truth = private.inputs
    guesses, scores = lists.for_tokens(private.released)
    hits: dict[str, tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_] | None]] = {
        "identity": (private.released == truth, None),
        "bayes": (guesses[:, 0] == truth, (guesses[:, :5] == truth[:, None]).any(1)),
    }
    contextual_info: dict[str, Any] | None = None
    if settings.contextual and train is not None:
        t = time.perf_counter()
        full = with_identity(lists, tau * logp[lists.released] + law.self_log_lik(lists.released, lam))
        bigram = BigramModel.fit(stats.inputs, stats.row_sizes, V)
        attack = ContextualAttack(
            E=victim.space.E.float().cpu(),
            logp=logp,
            bigram=bigram,
            window=settings.window,
            rank=settings.rank,
            epochs=settings.epochs,
            seed=settings.attacker_seed % 2**31,
        )
        attack.fit(train, *full.for_tokens(train.released))
        ranked = attack.rank_lists(private, *full.for_tokens(private.released))
        hits["contextual"] = (ranked[:, 0] == truth, (ranked[:, :5] == truth[:, None]).any(1))
        timing["contextual"] = time.perf_counter() - t
        contextual_info = {
            "model": "reranker of the Bayes top-k plus the released token: linear over 5 features + rank-"
            f"{settings.rank} bilinear context (window {settings.window})",
            "train_tokens": attack.train_tokens,
            "train_rows": train.n_rows,
        }

    attacks: dict[str, Any] = {}
    for i, (name, (top1, top5)) in enumerate(hits.items()):
        entry: dict[str, Any] = {"recovery_top1": _score(top1, private, settings, 10 * i)}
        entry["recovery_top5"] = _score(top5, private, settings, 10 * i + 1) if top5 is not None else None
        attacks[name] = entry
    diag = _diagnostics().compute(
        predictions=private.released.tolist(), references=truth.tolist(), min_count=settings.min_count
    )
    best = max(attacks, key=lambda a: attacks[a]["recovery_top1"]["value"])
    record: dict[str, Any] = {
        "mechanism": config.mechanism,
        "epsilon": config.epsilon,
        "delta": config.delta,
        "postprocess": config.postprocess,
        "options": dict(config.options),
        "model": config.model,
        "candidates": config.candidates,
        "n_private_rows": private.n_rows,
        "n_private_tokens": int(private.inputs.size),
        "n_public_rows": {"statistics": stats.n_rows, "training": 0 if train is None else train.n_rows},
        "replacement_rate": private.replacement_rate(),
        "recovery_top1": attacks[best]["recovery_top1"]["value"],
        "best_attack": best,
        "attacks": attacks,
        "deniability": {k: diag[k] for k in ("n_w_mean", "s_w_mean", "s_w_per_occurrence_mean", "n_types")},
        "bayes_law": law.method,
        "bayes_lambda": float(law.lambdas[lam]),
        "bayes_prior_weight": tau,
        "bayes_tuning_top1": tuning,
        "contextual_model": contextual_info,
        "settings": settings.to_dict(),
        "timing_s": timing,
    }
    return record, private
