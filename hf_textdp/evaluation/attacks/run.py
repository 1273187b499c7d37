"""One attack evaluation: release a private corpus, attack it, score by token group with intervals.

:func:`run_attack` is what ``hf-textdp attack`` and the attack recipes call (docs/attacks.md).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from ...config import PrivatizerConfig
from ...errors import InvalidParameterError
from ...io.models import resolved_candidates
from ...privatizer import Privatizer
from ...utils.progress import progress_bar
from .bayes import ExactLaw, GuessLists, has_exact_law, log_prior, with_identity
from .contextual import BigramModel, ContextualAttack
from .corpus import ReleasedCorpus, RowLayout, release_corpus
from .fitted import FittedLaw
from .inversion import InversionAttack
from .inversion_model import inversion_model
from .record import Hits, grouped, headline, span_scores
from .scoring import frequent_mask
from .settings import HOLDOUT_SPLIT, STATS_SPLIT, TRAIN_SPLIT, AttackSettings, attacker


__all__ = ["AttackSettings", "run_attack", "shares_ngram", "ATTACKS"]

ATTACKS = ("identity", "prior", "bayes", "contextual", "inversion")

_NOT_ALNUM = re.compile(r"[\W_]+")


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


@lru_cache(maxsize=1)
def _diagnostics() -> Any:
    """The local ``privacy_diagnostics`` evaluate module (N_w, S_w), loaded once per process."""
    from ..common import Metrics

    return Metrics().diagnostics


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
    shared, private_texts = _private_rows(config, private_texts, public_texts, spans, span_kinds, settings)
    t = time.perf_counter()
    victim = Privatizer(config, seed=seed, allow_weak_seed=True)
    private = release_corpus(victim, private_texts, keep_texts=keep_texts, keep_rows=True)
    timing["release_private"] = time.perf_counter() - t
    bar.update(1)
    say(f"released {private.inputs.size:,} private tokens (replacement rate {private.replacement_rate():.3f})")
    t = time.perf_counter()
    public = _release_public(config, settings, public_texts, int(victim.engine.space.V))
    timing["release_public"] = time.perf_counter() - t
    bar.update(1)
    t = time.perf_counter()
    bayes = _bayes(public, private, settings)
    timing["bayes"] = time.perf_counter() - t
    bar.update(1)
    say(
        f"bayes lists ({bayes.law.method} law, λ = {bayes.law.lambdas[bayes.lam]:.4g}, prior weight {bayes.tau:g}) "
        f"for {bayes.lists.released.size:,} released tokens"
    )
    guesser = _Guesser(bayes, public.prior_top, float(config.epsilon))
    _train_models(guesser, config, victim, public, settings, timing, lambda: bar.update(1), say)
    t = time.perf_counter()
    hits = guesser.hits(private)
    groups = grouped(private, hits, public.frequent, settings.bootstrap, settings.attacker_seed)
    heldout: dict[str, dict[str, float]] = {}
    if public.hold is not None:
        for name, per in grouped(public.hold, guesser.hits(public.hold), public.frequent, 0, 0).items():
            heldout[name] = {g: e["top1"]["value"] for g, e in per.items()}
    timing["predict_and_score"] = time.perf_counter() - t
    bar.update(1)
    bar.close()
    if not heldout:
        say("no held-out public rows: the headline attack is chosen on the private rows")
    record = _record(config, settings, private, public, guesser, groups, heldout, int(shared.sum()))
    record["timing_s"] = timing
    if spans is not None:
        new_row = np.cumsum(~shared) - 1  # a kept row's index after the shared rows are left out
        record["spans"] = span_scores(private, hits, spans, span_kinds, shared, new_row, settings)
    return record, private


def _train_models(
    guesser: _Guesser,
    config: PrivatizerConfig,
    victim: Privatizer,
    public: _Public,
    settings: AttackSettings,
    timing: dict[str, float],
    done: Callable[[], None],
    say: Callable[[str], None],
) -> None:
    """Train the contextual reranker and the inversion model the settings ask for, on the attacker's public rows."""
    if settings.contextual and public.train is not None:
        t = time.perf_counter()
        guesser.contextual, guesser.contextual_info = _contextual(victim, public, guesser.bayes, settings)
        timing["contextual"] = time.perf_counter() - t
        done()
    if settings.inversion and public.train_texts:
        t = time.perf_counter()
        guesser.inverter = inversion_model(config, settings, victim, public.train_texts, public.train_all, say)
        timing["inversion_train"] = time.perf_counter() - t
        done()


def _private_rows(
    config: PrivatizerConfig,
    private_texts: Sequence[str],
    public_texts: Sequence[str],
    spans: Sequence[tuple[int, int, int]] | None,
    span_kinds: Sequence[str] | None,
    settings: AttackSettings,
) -> tuple[npt.NDArray[np.bool_], list[str]]:
    """The arguments checked; which private rows also occur in the public text, and the others (attacked)."""
    bad = [r for r, _, _ in spans or () if not 0 <= r < len(private_texts)]
    if bad:
        raise InvalidParameterError(f"spans: row {bad[0]} is not a row of the {len(private_texts)} private rows.")
    if span_kinds is not None and (spans is None or len(span_kinds) != len(spans)):
        raise InvalidParameterError(
            f"span_kinds: one kind per span is needed, got {len(span_kinds)} kinds for "
            f"{0 if spans is None else len(spans)} spans."
        )
    shared = in_public(private_texts, public_texts)
    kept = [t for t, f in zip(private_texts, shared, strict=True) if not f]
    if not kept:
        raise InvalidParameterError("--private: every private row also occurs in the public text; nothing to attack.")
    if settings.inversion_pool and config.epsilon not in settings.inversion_pool:
        raise InvalidParameterError(
            f"inversion_pool: the release's ε = {config.epsilon:g} must be one of the pool, got "
            f"{list(settings.inversion_pool)}."
        )
    return shared, kept


@dataclass
class _Public:
    """The attacker's public corpus, privatized under its own keys: statistics (prior, bigrams), training rows
    (tuning, the contextual and inversion models) and held-out rows (the headline attack per group)."""

    attacker: Privatizer  # the statistics rows' privatizer: the Bayes law is read from it
    stats: ReleasedCorpus
    train_texts: list[str]
    train_all: ReleasedCorpus | None  # every training row released (a single-ε inversion model reads them all)
    train: ReleasedCorpus | None  # its first train_rows
    hold: ReleasedCorpus | None
    logp: npt.NDArray[np.float64]
    frequent: npt.NDArray[np.bool_]
    prior_top: npt.NDArray[np.int64]


def _release_public(
    config: PrivatizerConfig, settings: AttackSettings, public_texts: Sequence[str], V: int
) -> _Public:
    n_train = max(settings.train_rows, settings.inversion_rows if settings.inversion else 0)
    stats_texts, train_texts, hold_texts = _split_public(
        list(public_texts), n_train, settings.attacker_seed, settings.holdout_rows, settings.stats_rows
    )
    stats_priv = attacker(config, settings, STATS_SPLIT)
    stats = release_corpus(stats_priv, stats_texts)
    counts = np.bincount(stats.inputs, minlength=V)
    # Bayes tuning and the contextual model read the first train_rows; a single-ε inversion model reads them all (a
    # pooled one releases its own). Rows are keyed by index, so the first rows are the same either way.
    n_released = len(train_texts) if settings.inversion and not settings.inversion_pool else settings.train_rows
    train_all = (
        release_corpus(attacker(config, settings, TRAIN_SPLIT), train_texts[:n_released], keep_rows=True)
        if train_texts
        else None
    )
    hold = (
        release_corpus(attacker(config, settings, HOLDOUT_SPLIT), hold_texts, keep_rows=True) if hold_texts else None
    )
    return _Public(
        attacker=stats_priv,
        stats=stats,
        train_texts=train_texts,
        train_all=train_all,
        train=first_rows(train_all, settings.train_rows) if train_all is not None else None,
        hold=hold,
        logp=log_prior(counts, settings.prior_alpha),
        frequent=frequent_mask(counts, settings.content_top),
        prior_top=np.argsort(-counts, kind="stable")[:5],
    )


@dataclass
class _Bayes:
    """The Bayes attack: its law (with λ at grid index ``lam``), the prior's weight τ and its guess lists."""

    law: ExactLaw | FittedLaw
    lam: int
    tau: float
    tuning: dict[str, float]
    lists: GuessLists


def _bayes(public: _Public, private: ReleasedCorpus, settings: AttackSettings) -> _Bayes:
    """The law read from the attacker's privatizer, λ and τ tuned on its training rows, the top-k lists of every
    released token of the private, training and held-out rows."""
    wanted = np.concatenate([c.released for c in (private, public.train, public.hold) if c is not None])
    law = build_law(public.attacker, settings)
    law.prepare(wanted, settings.lambda_rho)
    lam, tau, tuning = tune(law, public.logp, public.train, settings)
    return _Bayes(law, lam, tau, tuning, law.lists(wanted, public.logp, tau, settings.top_k, lam))


def _contextual(
    victim: Privatizer, public: _Public, bayes: _Bayes, settings: AttackSettings
) -> tuple[tuple[ContextualAttack, GuessLists], dict[str, Any]]:
    """The contextual reranker trained on the attacker's privatized training rows, and what the record says of it."""
    assert public.train is not None
    lists, tau, lam = bayes.lists, bayes.tau, bayes.lam
    full = with_identity(lists, tau * public.logp[lists.released] + bayes.law.self_log_lik(lists.released, lam))
    bigram = BigramModel.fit(public.stats.inputs, public.stats.row_sizes, int(victim.engine.space.V))
    attack = ContextualAttack(
        E=victim.engine.space.E.float().cpu(),
        logp=public.logp,
        bigram=bigram,
        window=settings.window,
        rank=settings.rank,
        epochs=settings.epochs,
        seed=settings.attacker_seed % 2**31,
    )
    attack.fit(public.train, *full.for_tokens(public.train.released))
    info = {
        "model": "reranker of the Bayes top-k plus the released token: linear over 5 features + rank-"
        f"{settings.rank} bilinear context (window {settings.window})",
        "train_tokens": attack.train_tokens,
        "train_rows": public.train.n_rows,
    }
    return (attack, full), info


@dataclass
class _Guesser:
    """Every attack's guesses for a released corpus: top-1 and top-5 hits against its true inputs."""

    bayes: _Bayes
    prior_top: npt.NDArray[np.int64]
    epsilon: float
    contextual: tuple[ContextualAttack, GuessLists] | None = None
    contextual_info: dict[str, Any] | None = None
    inverter: InversionAttack | None = None

    def hits(self, c: ReleasedCorpus) -> dict[str, Hits]:
        truth, prior_top = c.inputs, self.prior_top
        g, _ = self.bayes.lists.for_tokens(c.released)
        out: dict[str, Hits] = {
            "identity": (c.released == truth, None),
            "prior": (truth == prior_top[0], np.isin(truth, prior_top)),
            "bayes": (g[:, 0] == truth, (g[:, :5] == truth[:, None]).any(1)),
        }
        if self.contextual is not None:
            ranked = self.contextual[0].rank_lists(c, *self.contextual[1].for_tokens(c.released))
            out["contextual"] = (ranked[:, 0] == truth, (ranked[:, :5] == truth[:, None]).any(1))
        if self.inverter is not None:
            pred = self.inverter.predict(c, self.epsilon)
            out["inversion"] = (pred[:, 0] == truth, (pred == truth[:, None]).any(1))
        return out


def _record(
    config: PrivatizerConfig,
    settings: AttackSettings,
    private: ReleasedCorpus,
    public: _Public,
    guesser: _Guesser,
    groups: dict[str, dict[str, dict[str, Any]]],
    heldout: dict[str, dict[str, float]],
    n_overlap: int,
) -> dict[str, Any]:
    """The attack record (docs/attacks.md): the release, the corpora's sizes, every attack's recovery overall and
    per group, the headline attack per group (chosen on held-out public rows where there are some)."""
    chosen = headline(heldout or {a: {g: e["top1"]["value"] for g, e in per.items()} for a, per in groups.items()})
    attacks: dict[str, Any] = {
        name: {"recovery_top1": per["all"]["top1"], "recovery_top5": per["all"]["top5"]}
        for name, per in groups.items()
    }
    diag = _diagnostics().compute(
        predictions=private.released.tolist(), references=private.inputs.tolist(), min_count=settings.min_count
    )
    best, bayes = chosen["all"], guesser.bayes
    return {
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
            "statistics": public.stats.n_rows,
            "training": 0 if public.train is None else public.train.n_rows,
            "heldout": 0 if public.hold is None else public.hold.n_rows,
        },
        "replacement_rate": private.replacement_rate(),
        "recovery_top1": attacks[best]["recovery_top1"]["value"],
        "best_attack": best,
        "headline": {g: {"attack": a, "heldout_top1": heldout.get(a, {}).get(g)} for g, a in chosen.items()},
        "attacks": attacks,
        "groups": groups,
        "heldout_top1": heldout,
        "content_top": settings.content_top,
        "deniability": {k: diag[k] for k in ("n_w_mean", "s_w_mean", "s_w_per_occurrence_mean", "n_types")},
        "bayes_law": bayes.law.method,
        "bayes_lambda": float(bayes.law.lambdas[bayes.lam]),
        "bayes_prior_weight": bayes.tau,
        "bayes_tuning_top1": bayes.tuning,
        "contextual_model": guesser.contextual_info,
        "inversion_model": None if guesser.inverter is None else guesser.inverter.info,
        "settings": settings.to_dict(),
    }
