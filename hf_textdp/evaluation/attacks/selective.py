"""Identifier recovery against a selective release (issue 54 item 6; docs/selective.md "What an attacker recovers").

The attacker knows each position's class, because the selection is visible (docs/mechanisms/selective.md §5), and
each class's mechanism and ε. Two attacks name an input for every candidate token of the release:

- ``identity``: the released token;
- ``bayes``: for a position released unchanged (``others="keep"``) the released token, which is the input with
  certainty; for a position released by the mechanism at ε (ε_s for the sensitive ones, the config's ε for the
  others) the Bayes attack of docs/attacks.md §2 under that ε: the law read from an attacker's privatizer at
  that ε (exact for tem and santext, fitted otherwise), λ and the prior's weight τ chosen where it recovers the
  most tokens of public text the attacker privatized at that ε with their own key.

Scored: the candidate tokens inside the injected identifiers (top-1) and the identifiers whole (every candidate
token inside one recovered), each with a 95 % row-bootstrap interval.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ...config import PrivatizerConfig
from ...privatizer import Privatizer
from ...space import CANDIDATE
from .corpus import ReleasedCorpus, release_corpus
from .intervals import row_bootstrap
from .run import _release_public, build_law, tune
from .settings import AttackSettings


__all__ = ["SelectiveRelease", "release_selective", "recover_identifiers"]

KEPT = -1.0  # the ε of a position released unchanged


@dataclass(frozen=True)
class SelectiveRelease:
    """A release's candidate tokens (:class:`~.corpus.ReleasedCorpus`, rows kept) and the ε each was released at
    (:data:`KEPT` for the unchanged ones): what the attacker knows besides the released tokens."""

    config: PrivatizerConfig
    corpus: ReleasedCorpus
    epsilon: npt.NDArray[np.float64]
    sensitive: npt.NDArray[np.bool_]


def release_selective(
    config: PrivatizerConfig, texts: Sequence[str], seed: int, batch_rows: int = 1000
) -> SelectiveRelease:
    """Release ``texts`` with ``config`` (selective or not) and mark each candidate token's class."""
    victim = Privatizer(config, seed=seed, allow_weak_seed=True)
    corpus = release_corpus(victim, texts, batch_rows=batch_rows, keep_rows=True)
    spec = config.sensitive
    if spec is None:
        eps = np.full(corpus.inputs.size, float(config.epsilon))
        return SelectiveRelease(config, corpus, eps, np.zeros(eps.size, dtype=bool))
    marks = []
    for start in range(0, len(texts), batch_rows):
        batch = list(texts[start : start + batch_rows])
        b = victim.read_batch(batch, list(range(start, start + len(batch))), None)
        assert b.marked is not None
        marks.append(b.marked[b.cls == CANDIDATE])
    sens = np.concatenate(marks) if marks else np.zeros(0, dtype=bool)
    other = KEPT if spec.others == "keep" else float(config.epsilon)
    return SelectiveRelease(config, corpus, np.where(sens, float(spec.epsilon), other), sens)


def _bayes_guesses(
    releases: Sequence[SelectiveRelease], public_texts: Sequence[str], settings: AttackSettings
) -> tuple[list[npt.NDArray[np.int64]], dict[str, Any]]:
    """Each release's Bayes top-1 per candidate token, one law per ε (shared by the releases at that ε)."""
    guesses = [r.corpus.released.copy() for r in releases]  # kept positions: the released token itself
    info: dict[str, Any] = {}
    for eps in sorted({float(e) for r in releases for e in np.unique(r.epsilon) if e != KEPT}):
        base = releases[0].config
        cfg = dataclasses.replace(base, epsilon=eps, sensitive=None)
        V = int(Privatizer(cfg, seed=settings.attacker_seed).engine.space.V)
        public = _release_public(cfg, settings, public_texts, V)
        assert public.train is not None
        wanted = np.concatenate([public.train.released, *(r.corpus.released[r.epsilon == eps] for r in releases)])
        law = build_law(public.attacker, settings)
        law.prepare(wanted, settings.lambda_rho)
        lam, tau, _ = tune(law, public.logp, public.train, settings)
        lists = law.lists(wanted, public.logp, tau, 1, lam)
        for r, g in zip(releases, guesses, strict=True):
            at = r.epsilon == eps
            g[at] = lists.for_tokens(r.corpus.released[at])[0][:, 0]
        info[f"{eps:g}"] = {"law": law.method, "lambda": float(law.lambdas[lam]), "tau": tau}
    return guesses, info


def _identifier_tokens(
    corpus: ReleasedCorpus, spans: Sequence[Sequence[tuple[int, int]]]
) -> tuple[npt.NDArray[np.bool_], list[tuple[int, npt.NDArray[np.int64]]]]:
    """Which candidate tokens lie inside an identifier, and each identifier's row and candidate tokens."""
    assert corpus.rows is not None
    offsets, starts = corpus.rows.offsets, corpus.starts
    inside = np.zeros(corpus.inputs.size, dtype=bool)
    each = []
    for r, row_spans in enumerate(spans):
        a, b = int(starts[r]), int(starts[r + 1])
        o = offsets[a:b]
        for s, e in row_spans:
            mine = np.flatnonzero((o[:, 0] < e) & (s < o[:, 1]) & (o[:, 1] > o[:, 0])) + a
            inside[mine] = True
            each.append((r, mine))
    return inside, each


def _rate(hits: npt.NDArray[np.bool_], rows: npt.NDArray[np.int64], n_rows: int, settings: AttackSettings) -> Any:
    sizes = np.bincount(rows, minlength=n_rows)
    order = np.argsort(rows, kind="stable")
    rate, lo, hi = row_bootstrap(hits[order], sizes, settings.bootstrap, settings.attacker_seed)
    return {"top1": round(100 * rate, 2), "ci95": [round(100 * lo, 2), round(100 * hi, 2)], "n": int(hits.size)}


def recover_identifiers(
    releases: dict[str, SelectiveRelease],
    spans: Sequence[Sequence[tuple[int, int]]],
    public_texts: Sequence[str],
    settings: AttackSettings,
) -> dict[str, Any]:
    """Top-1 recovery of identifier tokens and whole identifiers per release and attack (module docstring).

    Args:
        releases (`dict`): name -> :func:`release_selective` of the same texts.
        spans (`list`): each row's identifier spans ``[(start, end), ...]``.
        public_texts (`list[str]`): the attacker's public text (never the private rows).
        settings (`AttackSettings`): the attacker (its key, λ/τ grids, rows it privatizes, bootstrap).
    """
    names = list(releases)
    bayes, laws = _bayes_guesses([releases[n] for n in names], public_texts, settings)
    out: dict[str, Any] = {"laws": laws, "releases": {}}
    for name, guess in zip(names, bayes, strict=True):
        c = releases[name].corpus
        inside, each = _identifier_tokens(c, spans)
        rows = c.row_of[inside]
        span_rows = np.asarray([r for r, _ in each], dtype=np.int64)
        per: dict[str, Any] = {}
        for attack, g in (("identity", c.released), ("bayes", guess)):
            hit = g == c.inputs
            whole = np.asarray([bool(t.size) and bool(hit[t].all()) for _, t in each], dtype=bool)
            per[attack] = {
                "tokens": _rate(hit[inside], rows, c.n_rows, settings),
                "identifiers": _rate(whole, span_rows, c.n_rows, settings),
            }
        per["identifier_tokens_selected_pct"] = round(100 * float(np.mean(releases[name].sensitive[inside])), 2)
        per["bayes_not_identity_pct"] = round(100 * float(np.mean(guess[inside] != c.released[inside])), 2)
        out["releases"][name] = per
    return out
