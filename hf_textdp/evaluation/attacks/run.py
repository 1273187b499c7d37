"""One attack evaluation: release a private corpus, attack it, score by token group with intervals.

:func:`run_attack` is what ``hf-textdp attack`` and the attack recipes call (docs/attacks.md).
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ...config import PrivatizerConfig
from ...errors import InvalidParameterError
from ...io.models import resolved_candidates
from ...privatizer import Privatizer
from ...utils.cache_path import cache_dir
from ...utils.progress import progress_bar
from .bayes import ExactLaw, GuessLists, has_exact_law, log_prior, with_identity
from .contextual import BigramModel, ContextualAttack
from .corpus import ReleasedCorpus, RowLayout, release_corpus
from .fitted import FittedLaw
from .intervals import row_bootstrap
from .inversion import InversionAttack, InversionBudget, load_encoder
from .scoring import frequent_mask, score_groups, span_recovery, token_groups, word_hits


__all__ = ["AttackSettings", "run_attack", "shares_ngram", "ATTACKS"]

ATTACKS = ("identity", "prior", "bayes", "contextual", "inversion")

# Keys of the attacker's own privatizations (public data only): distinct from any victim key.
_STATS_SPLIT, _TRAIN_SPLIT = "attack-public-stats", "attack-public-train"
_HOLDOUT_SPLIT, _INVERSION_SPLIT = "attack-public-holdout", "attack-public-inversion"
_NOT_ALNUM = re.compile(r"[\W_]+")


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


def _split_public(
    texts: Sequence[str], train_rows: int, seed: int, holdout_rows: int = 0, stats_rows: int | None = None
) -> tuple[list[str], list[str], list[str]]:
    """A seeded half of the public rows for statistics (at most ``stats_rows`` of them); of the rest,
    ``holdout_rows`` held out and (at most ``train_rows``) for training."""
    order = np.random.default_rng(seed).permutation(len(texts))
    half = (len(texts) + 1) // 2
    stats = [texts[i] for i in np.sort(order[:half][:stats_rows])]
    rest = np.sort(order[half:])
    n_hold = min(holdout_rows, rest.size // 2)
    hold = [texts[i] for i in rest[rest.size - n_hold :]]
    train = [texts[i] for i in rest[: rest.size - n_hold][:train_rows]]
    return stats, train, hold


def _key(text: str) -> str:
    """A row's letters and digits, lower-cased: one key for one sentence tokenized two ways (MR's "century's"
    and SST's "century 's")."""
    return _NOT_ALNUM.sub("", text.lower())


def in_public(private: Sequence[str], public: Sequence[str]) -> npt.NDArray[np.bool_]:
    """Whether each private row also occurs in the public text (case, spacing and punctuation ignored)."""
    seen = {_key(t) for t in public}
    return np.fromiter((_key(t) in seen for t in private), dtype=bool, count=len(private))


def shares_ngram(public: Sequence[str], private: Sequence[str], n: int = 8) -> npt.NDArray[np.bool_]:
    """Whether each public row shares a run of ``n`` words (letters and digits, lower-cased) with a private row.

    Exact matching (:func:`in_public`) misses a review that another task holds cut or re-tokenized (SST-5 splits
    MR's snippets into sentences): of the 1,583 MR rows no public row matches exactly, 86 % have half their
    words or more in 8-word runs found in CR, MPQA, SST-5 or TREC-6."""
    if n < 1:
        raise InvalidParameterError(f"public_ngram must be a positive number of words, got {n}.")

    def grams(text: str) -> set[tuple[str, ...]]:
        words = [w for w in _NOT_ALNUM.split(text.lower()) if w]
        if len(words) < n:  # a short row is its own (only) run
            return {tuple(words)} if words else set()
        return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}

    seen: set[tuple[str, ...]] = set()
    for t in private:
        seen |= grams(t)
    return np.fromiter((not grams(t).isdisjoint(seen) for t in public), dtype=bool, count=len(public))


def split_overlap(private: Sequence[str], public: Sequence[str]) -> tuple[list[str], int]:
    """The private rows that do not occur in the public text (:func:`in_public`), and how many did."""
    found = in_public(private, public)
    return [t for t, f in zip(private, found, strict=True) if not f], int(found.sum())


def first_rows(corpus: ReleasedCorpus, n: int) -> ReleasedCorpus:
    """The corpus's first ``n`` rows."""
    n = min(n, corpus.n_rows)
    m = int(corpus.starts[n])
    rows = corpus.rows
    if rows is not None:
        words = rows.word_of[:m]
        rows = RowLayout(rows.ids[:n], rows.cand_at[:n], words, rows.offsets[:m])
    return ReleasedCorpus(corpus.inputs[:m], corpus.released[:m], corpus.row_sizes[:n], corpus.texts[:n], rows)


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
    spans: Sequence[tuple[int, int, int]] | None = None,
    span_kinds: Sequence[str] | None = None,
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
        spans (`list[tuple[int, int, int]]`, *optional*): character spans (row of ``private_texts``, start, end)
            to score whole, such as injected identifiers: ``spans`` in the record (scoring.span_recovery).
        span_kinds (`list[str]`, *optional*): each span's kind (``"name"``, ``"card"``, ...): the record's
            ``spans`` then also holds ``by_kind``, the same scores per kind.

    Returns:
        The record and the released corpus. ``attacks`` holds each attack's top-1 and top-5 recovery over all
        candidate tokens with row-bootstrap 95 % intervals; ``groups`` the same per group of tokens and of
        whole words (scoring.py); ``headline`` the attack chosen per group on held-out public rows the
        attacker privatized (never on the private rows); ``recovery_top1`` is the headline attack's top-1
        over all tokens. Private rows that also occur in the public text are left out
        (``n_private_rows_in_public``).
    """
    settings = settings or AttackSettings()
    say = progress or (lambda _m: None)
    timing: dict[str, float] = {}
    stages = 4 + int(settings.contextual) + int(settings.inversion)
    bar = progress_bar(total=stages, desc="attack", unit="stage", enabled=progress is not None)
    bad = [r for r, _, _ in spans or () if not 0 <= r < len(private_texts)]
    if bad:
        raise InvalidParameterError(f"spans: row {bad[0]} is not a row of the {len(private_texts)} private rows.")
    if span_kinds is not None and (spans is None or len(span_kinds) != len(spans)):
        raise InvalidParameterError(
            f"span_kinds: one kind per span is needed, got {len(span_kinds)} kinds for "
            f"{0 if spans is None else len(spans)} spans."
        )
    shared = in_public(private_texts, public_texts)
    n_overlap = int(shared.sum())
    new_row = np.cumsum(~shared) - 1  # a kept row's index after the shared rows are left out
    private_texts = [t for t, f in zip(private_texts, shared, strict=True) if not f]
    if not private_texts:
        raise InvalidParameterError("--private: every private row also occurs in the public text; nothing to attack.")
    if settings.inversion_pool and config.epsilon not in settings.inversion_pool:
        raise InvalidParameterError(
            f"inversion_pool: the release's ε = {config.epsilon:g} must be one of the pool, got "
            f"{list(settings.inversion_pool)}."
        )
    t = time.perf_counter()
    victim = Privatizer(config, seed=seed, allow_weak_seed=True)
    private = release_corpus(victim, private_texts, keep_texts=keep_texts, keep_rows=True)
    timing["release_private"] = time.perf_counter() - t
    bar.update(1)
    V = int(victim.engine.space.V)
    say(f"released {private.inputs.size:,} private tokens (replacement rate {private.replacement_rate():.3f})")

    t = time.perf_counter()
    n_train = max(settings.train_rows, settings.inversion_rows if settings.inversion else 0)
    stats_texts, train_texts, hold_texts = _split_public(
        list(public_texts), n_train, settings.attacker_seed, settings.holdout_rows, settings.stats_rows
    )
    attacker = _attacker(config, settings, _STATS_SPLIT)
    stats = release_corpus(attacker, stats_texts)
    counts = np.bincount(stats.inputs, minlength=V)
    logp = log_prior(counts, settings.prior_alpha)
    frequent = frequent_mask(counts, settings.content_top)
    prior_top = np.argsort(-counts, kind="stable")[:5]
    # Bayes tuning and the contextual model read the first train_rows; a single-ε inversion model reads them all (a
    # pooled one releases its own). Rows are keyed by index, so the first rows are the same either way.
    n_released = len(train_texts) if settings.inversion and not settings.inversion_pool else settings.train_rows
    train_all = (
        release_corpus(_attacker(config, settings, _TRAIN_SPLIT), train_texts[:n_released], keep_rows=True)
        if train_texts
        else None
    )
    train = first_rows(train_all, settings.train_rows) if train_all is not None else None
    hold = (
        release_corpus(_attacker(config, settings, _HOLDOUT_SPLIT), hold_texts, keep_rows=True) if hold_texts else None
    )
    timing["release_public"] = time.perf_counter() - t
    bar.update(1)

    t = time.perf_counter()
    wanted = np.concatenate([c.released for c in (private, train, hold) if c is not None])
    law = build_law(attacker, settings)
    law.prepare(wanted, settings.lambda_rho)
    lam, tau, tuning = tune(law, logp, train, settings)
    lists = law.lists(wanted, logp, tau, settings.top_k, lam)
    timing["bayes"] = time.perf_counter() - t
    bar.update(1)
    say(
        f"bayes lists ({law.method} law, λ = {law.lambdas[lam]:.4g}, prior weight {tau:g}) "
        f"for {lists.released.size:,} released tokens"
    )

    contextual: tuple[ContextualAttack, GuessLists] | None = None
    contextual_info: dict[str, Any] | None = None
    if settings.contextual and train is not None:
        t = time.perf_counter()
        full = with_identity(lists, tau * logp[lists.released] + law.self_log_lik(lists.released, lam))
        bigram = BigramModel.fit(stats.inputs, stats.row_sizes, V)
        attack = ContextualAttack(
            E=victim.engine.space.E.float().cpu(),
            logp=logp,
            bigram=bigram,
            window=settings.window,
            rank=settings.rank,
            epochs=settings.epochs,
            seed=settings.attacker_seed % 2**31,
        )
        attack.fit(train, *full.for_tokens(train.released))
        contextual = (attack, full)
        timing["contextual"] = time.perf_counter() - t
        bar.update(1)
        contextual_info = {
            "model": "reranker of the Bayes top-k plus the released token: linear over 5 features + rank-"
            f"{settings.rank} bilinear context (window {settings.window})",
            "train_tokens": attack.train_tokens,
            "train_rows": train.n_rows,
        }

    inverter: InversionAttack | None = None
    if settings.inversion and train_texts:
        t = time.perf_counter()
        inverter = _inversion(config, settings, victim, train_texts, train_all, say)
        timing["inversion_train"] = time.perf_counter() - t
        bar.update(1)

    def hits_for(c: ReleasedCorpus) -> dict[str, Hits]:
        truth = c.inputs
        g, _ = lists.for_tokens(c.released)
        out: dict[str, Hits] = {
            "identity": (c.released == truth, None),
            "prior": (truth == prior_top[0], np.isin(truth, prior_top)),
            "bayes": (g[:, 0] == truth, (g[:, :5] == truth[:, None]).any(1)),
        }
        if contextual is not None:
            ranked = contextual[0].rank_lists(c, *contextual[1].for_tokens(c.released))
            out["contextual"] = (ranked[:, 0] == truth, (ranked[:, :5] == truth[:, None]).any(1))
        if inverter is not None:
            pred = inverter.predict(c, float(config.epsilon))
            out["inversion"] = (pred[:, 0] == truth, (pred == truth[:, None]).any(1))
        return out

    t = time.perf_counter()
    hits = hits_for(private)
    groups = _grouped(private, hits, frequent, settings.bootstrap, settings.attacker_seed)
    heldout: dict[str, dict[str, float]] = {}
    if hold is not None:
        for name, per in _grouped(hold, hits_for(hold), frequent, 0, 0).items():
            heldout[name] = {g: e["top1"]["value"] for g, e in per.items()}
    timing["predict_and_score"] = time.perf_counter() - t
    bar.update(1)
    bar.close()
    headline = _headline(heldout or {a: {g: e["top1"]["value"] for g, e in per.items()} for a, per in groups.items()})
    if not heldout:
        say("no held-out public rows: the headline attack is chosen on the private rows")

    attacks: dict[str, Any] = {
        name: {"recovery_top1": per["all"]["top1"], "recovery_top5": per["all"]["top5"]}
        for name, per in groups.items()
    }
    diag = _diagnostics().compute(
        predictions=private.released.tolist(), references=private.inputs.tolist(), min_count=settings.min_count
    )
    best = headline["all"]
    record: dict[str, Any] = {
        "mechanism": config.mechanism,
        "epsilon": config.epsilon,
        "delta": config.delta,
        "postprocess": config.postprocess,
        "options": dict(config.options),
        "model": config.model,
        "candidates": config.candidates,
        # the set the space was built on (scripts resolved from the model's language): the attack table's key
        "candidates_resolved": resolved_candidates(config.model, config.candidates).to_value(),
        "n_private_rows": private.n_rows,
        "n_private_rows_in_public": n_overlap,
        "n_private_tokens": int(private.inputs.size),
        "n_public_rows": {
            "statistics": stats.n_rows,
            "training": 0 if train is None else train.n_rows,
            "heldout": 0 if hold is None else hold.n_rows,
        },
        "replacement_rate": private.replacement_rate(),
        "recovery_top1": attacks[best]["recovery_top1"]["value"],
        "best_attack": best,
        "headline": {g: {"attack": a, "heldout_top1": heldout.get(a, {}).get(g)} for g, a in headline.items()},
        "attacks": attacks,
        "groups": groups,
        "heldout_top1": heldout,
        "content_top": settings.content_top,
        "deniability": {k: diag[k] for k in ("n_w_mean", "s_w_mean", "s_w_per_occurrence_mean", "n_types")},
        "bayes_law": law.method,
        "bayes_lambda": float(law.lambdas[lam]),
        "bayes_prior_weight": tau,
        "bayes_tuning_top1": tuning,
        "contextual_model": contextual_info,
        "inversion_model": None if inverter is None else inverter.info,
        "settings": settings.to_dict(),
        "timing_s": timing,
    }
    if spans is not None:
        record["spans"] = _span_scores(private, hits, spans, span_kinds, shared, new_row, settings)
    return record, private


def _span_scores(
    private: ReleasedCorpus,
    hits: dict[str, Hits],
    spans: Sequence[tuple[int, int, int]],
    kinds: Sequence[str] | None,
    shared: npt.NDArray[np.bool_],
    new_row: npt.NDArray[np.int64],
    settings: AttackSettings,
) -> dict[str, Any]:
    """Whole-span recovery (scoring.span_recovery) of the spans in rows kept, overall and per kind."""
    keep = [i for i, (r, _, _) in enumerate(spans) if not shared[r]]
    kept = [(int(new_row[spans[i][0]]), spans[i][1], spans[i][2]) for i in keep]
    seed = settings.attacker_seed + 77
    out: dict[str, Any] = {
        "n_given": len(spans),
        "n_in_public_rows": len(spans) - len(kept),
        "attacks": span_recovery(private, hits, kept, settings.bootstrap, seed),
    }
    if kinds is not None:
        out["by_kind"] = {
            kind: span_recovery(
                private,
                hits,
                [s for s, i in zip(kept, keep, strict=True) if kinds[i] == kind],
                settings.bootstrap,
                seed,
            )
            for kind in dict.fromkeys(kinds[i] for i in keep)
        }
    return out


Hits = tuple[npt.NDArray[np.bool_], "npt.NDArray[np.bool_] | None"]


def _grouped(
    c: ReleasedCorpus, hits: dict[str, Hits], frequent: npt.NDArray[np.bool_], resamples: int, seed: int
) -> dict[str, dict[str, dict[str, Any]]]:
    """Every attack's recovery per token group and per whole-word group (scoring.py)."""
    out = score_groups(hits, c.row_of, c.n_rows, token_groups(c, frequent), resamples, seed)
    w_hits, w_rows, w_groups = word_hits(c, hits)
    for name, per in score_groups(w_hits, w_rows, c.n_rows, w_groups, resamples, seed + 7).items():
        out[name].update(per)
    return out


def _headline(top1: dict[str, dict[str, float]]) -> dict[str, str]:
    """Per group, the attack with the best top-1 in ``top1`` (held-out values); ties go to the earlier attack."""
    groups = next(iter(top1.values())).keys()
    out = {}
    for g in groups:
        vals = {a: v[g] for a, v in top1.items() if v.get(g) is not None and not np.isnan(v[g])}
        out[g] = max(vals, key=lambda a: vals[a]) if vals else "identity"
    return out


_POOLED: dict[str, InversionAttack] = {}


def _inversion_key(
    config: PrivatizerConfig, settings: AttackSettings, victim: Privatizer, train_texts: Sequence[str]
) -> str:
    """What a trained inversion model depends on, hashed: the configuration (less ε for a model pooled over several),
    the pool, the budget, the attacker's key, the space and the public rows (never a private row or the victim's
    key), and the versions."""
    import transformers

    from ...version import __version__

    h = hashlib.sha256(b"hf_textdp/attacks/inversion/v1\x00")
    parts = (
        repr(replace(config, epsilon=1.0) if settings.inversion_pool else config),
        repr(settings.inversion_pool),
        repr(settings.budget()),
        str(settings.attacker_seed),
        victim.engine.space.space_hash,
        __version__,
        torch.__version__,
        transformers.__version__,
    )
    for part in (*parts, *train_texts):
        h.update(part.encode("utf-8") + b"\x00")
    return h.hexdigest()


def _inversion(
    config: PrivatizerConfig,
    settings: AttackSettings,
    victim: Privatizer,
    train_texts: list[str],
    train_all: ReleasedCorpus | None,
    say: Callable[[str], None],
) -> InversionAttack:
    """The inversion attack trained on the attacker's privatized public rows (one ε, or pooled over a family's);
    a model kept in the cache (``settings.inversion_cache``) is read back instead of trained again."""
    budget = settings.budget()
    pool = settings.inversion_pool
    key = _inversion_key(config, settings, victim, train_texts)
    if pool and key in _POOLED:
        say(f"inversion: the model pooled over ε ∈ {list(pool)} is reused")
        return _POOLED[key]
    space = victim.engine.space
    pad = getattr(space.tokenizer, "pad_token_id", None) if space.tokenizer is not None else None
    inv = InversionAttack(
        encoder=load_encoder(config.model),
        candidate_ids=space.candidate_ids.clone(),
        pad_id=int(pad or 0),
        budget=budget,
        seed=settings.attacker_seed % 2**31,
    )
    saved = cache_dir() / "attacks" / "inversion" / f"{key}.pt"
    if settings.inversion_cache and saved.is_file():
        info = inv.load(saved)
        say(f"inversion: read the model trained earlier ({info['steps']} steps) from {saved}")
    else:
        if pool:
            corpora = []
            for j, eps in enumerate(pool):
                cfg = replace(config, epsilon=eps)
                texts = train_texts[j :: len(pool)][: budget.rows // len(pool)]
                corpora.append(
                    (release_corpus(_attacker(cfg, settings, f"{_INVERSION_SPLIT}-{j}"), texts, keep_rows=True), eps)
                )
        else:
            assert train_all is not None
            corpora = [(train_all, float(config.epsilon))]
        info = inv.fit(corpora, progress=say)
        info["pool"] = list(pool)
        say(f"inversion trained: {info['steps']} steps, final loss {info['final_loss']:.3f} ({info['stopped']})")
        if settings.inversion_cache:
            inv.save(saved)
    if pool:
        _POOLED.clear()
        _POOLED[key] = inv
    return inv
