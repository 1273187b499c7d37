"""Contextual inversion: a reranker of the Bayes candidates that reads the released sentence (docs/attacks.md §3).

The adversary privatizes public text with the same mechanism (a key of their own), then trains a
model to predict each original token from the privatized sentence. Lighter than a transformer with a
vocabulary head, so it fits two CPU cores: it rescores the Bayes attack's ``k`` candidates of each
token (the truth is out of reach when it is not among them) with

- the Bayes log-posterior (normalised over the list), the log-prior, and whether the candidate is the
  released token itself;
- a bigram language model of the clean public text: log P(x | released left neighbour) and
  log P(released right neighbour | x) (Dirichlet-smoothed towards the unigram);
- a learned low-rank bilinear match between the candidate's embedding row and the mean embedding of
  the released tokens within ``window`` positions (the sentence's topic).

A linear layer over these plus the bilinear term is trained with cross-entropy over the list, on the
tokens of the attacker's privatized corpus whose truth is in their list.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from .corpus import ReleasedCorpus


__all__ = ["BigramModel", "ContextualAttack"]


@dataclass(frozen=True)
class BigramModel:
    """Counts of adjacent candidate tokens in clean public text; row boundaries are the token ``V``."""

    V: int
    keys: npt.NDArray[np.int64]  # sorted (left, right) pairs as left·(V+1) + right
    counts: npt.NDArray[np.int64]
    left_totals: npt.NDArray[np.int64]  # [V+1] how often each token has a right neighbour
    unigram: npt.NDArray[np.float64]  # [V+1] smoothed probabilities
    beta: float = 5.0

    @classmethod
    def fit(cls, inputs: npt.NDArray[np.int64], row_sizes: npt.NDArray[np.int64], V: int) -> BigramModel:
        seq = _with_boundaries(inputs, row_sizes, V)
        left, right = seq[:-1], seq[1:]
        ok = ~((left == V) & (right == V))
        keys, counts = np.unique(left[ok] * (V + 1) + right[ok], return_counts=True)
        totals = np.bincount(left[ok], minlength=V + 1)
        uni = np.bincount(seq, minlength=V + 1).astype(np.float64) + 0.5
        return cls(V, keys, counts, totals, uni / uni.sum())

    def log_prob(self, left: npt.NDArray[np.int64], right: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """log P(right | left), Dirichlet-smoothed: (n(left, right) + β·p(right)) / (n(left) + β)."""
        key = left * (self.V + 1) + right
        idx = np.searchsorted(self.keys, key)
        idx_c = np.minimum(idx, self.keys.size - 1)
        n = np.where(self.keys[idx_c] == key, self.counts[idx_c], 0).astype(np.float64)
        out: npt.NDArray[np.float64] = np.log(n + self.beta * self.unigram[right]) - np.log(
            self.left_totals[left] + self.beta
        )
        return out


def _with_boundaries(tokens: npt.NDArray[np.int64], row_sizes: npt.NDArray[np.int64], V: int) -> npt.NDArray[np.int64]:
    """Tokens with the boundary token V before each row and after the last."""
    out = np.full(tokens.size + row_sizes.size + 1, V, dtype=np.int64)
    row_of = np.repeat(np.arange(row_sizes.size, dtype=np.int64), row_sizes)
    out[np.arange(tokens.size) + row_of + 1] = tokens
    return out


def _neighbours(corpus: ReleasedCorpus, V: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Each token's released left and right neighbours in its row (``V`` at a row's ends)."""
    n = corpus.released.size
    starts = corpus.starts
    row_of = corpus.row_of
    idx = np.arange(n)
    left = np.full(n, V, dtype=np.int64)
    right = np.full(n, V, dtype=np.int64)
    has_left = idx > starts[row_of]
    has_right = idx < starts[row_of + 1] - 1
    left[has_left] = corpus.released[idx[has_left] - 1]
    right[has_right] = corpus.released[idx[has_right] + 1]
    return left, right


def _context(corpus: ReleasedCorpus, E: torch.Tensor, window: int) -> torch.Tensor:
    """Mean embedding of the released tokens within ``window`` positions of each token, itself excluded."""
    n = corpus.released.size
    rel = E[torch.from_numpy(corpus.released)]
    csum = torch.zeros(n + 1, E.shape[1])
    torch.cumsum(rel, dim=0, out=csum[1:])
    starts = torch.from_numpy(corpus.starts)
    row_of = torch.from_numpy(corpus.row_of)
    idx = torch.arange(n)
    lo = torch.maximum(idx - window, starts[row_of])
    hi = torch.minimum(idx + window + 1, starts[row_of + 1])
    total = csum[hi] - csum[lo] - rel
    count = (hi - lo - 1).clamp(min=1).unsqueeze(1).float()
    return total / count


N_FEATURES = 5


def _features(
    corpus: ReleasedCorpus,
    guesses: npt.NDArray[np.int64],
    scores: npt.NDArray[np.float64],
    logp: npt.NDArray[np.float64],
    bigram: BigramModel,
) -> torch.Tensor:
    """``[N, k, 5]``: normalised log-posterior, log-prior, identity, log P(x | left), log P(right | x)."""
    V = bigram.V
    valid = guesses >= 0
    g = np.where(valid, guesses, 0)
    post = scores - np.logaddexp.reduce(np.where(valid, scores, -np.inf), axis=1, keepdims=True)
    left, right = _neighbours(corpus, V)
    k = guesses.shape[1]
    feats = np.zeros(guesses.shape + (N_FEATURES,), dtype=np.float32)
    feats[..., 0] = np.where(valid, post, 0.0)
    feats[..., 1] = logp[g]
    feats[..., 2] = g == corpus.released[:, None]
    feats[..., 3] = bigram.log_prob(np.repeat(left, k), g.ravel()).reshape(g.shape)
    feats[..., 4] = bigram.log_prob(g.ravel(), np.repeat(right, k)).reshape(g.shape)
    feats[~valid] = 0.0
    return torch.from_numpy(feats)


class _Reranker(torch.nn.Module):
    def __init__(self, d: int, rank: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(N_FEATURES, 1)
        self.a = torch.nn.Linear(d, rank, bias=False)
        self.b = torch.nn.Linear(d, rank, bias=False)
        with torch.no_grad():
            self.linear.weight.zero_()
            self.linear.weight[0, 0] = 1.0  # start from the Bayes ranking
            self.a.weight.mul_(0.1)
            self.b.weight.mul_(0.1)

    def forward(self, feats: torch.Tensor, cand_emb: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        bil = (self.a(cand_emb) * self.b(ctx).unsqueeze(1)).sum(-1)
        out: torch.Tensor = self.linear(feats).squeeze(-1) + bil
        return out


@dataclass
class ContextualAttack:
    """The trained reranker and what it reads: the public bigram model, the prior and the embedding rows."""

    E: torch.Tensor
    logp: npt.NDArray[np.float64]
    bigram: BigramModel
    window: int = 3
    rank: int = 32
    epochs: int = 4
    batch: int = 2048
    lr: float = 0.01
    seed: int = 0
    model: _Reranker | None = None
    train_tokens: int = 0

    def fit(self, corpus: ReleasedCorpus, guesses: npt.NDArray[np.int64], scores: npt.NDArray[np.float64]) -> None:
        """Train on an attacker-privatized public corpus (its inputs are the labels)."""
        torch.manual_seed(self.seed)
        target = guesses == corpus.inputs[:, None]
        usable = target.any(1)
        feats = _features(corpus, guesses, scores, self.logp, self.bigram)[torch.from_numpy(usable)]
        ctx = _context(corpus, self.E, self.window)[torch.from_numpy(usable)]
        g = torch.from_numpy(np.where(guesses >= 0, guesses, 0)[usable])
        mask = torch.from_numpy(guesses[usable] >= 0)
        y = torch.from_numpy(target[usable].argmax(1))
        self.model = _Reranker(int(self.E.shape[1]), self.rank)
        opt = torch.optim.Adam(self.model.parameters(), lr=self.lr)
        n = int(y.numel())
        self.train_tokens = n
        gen = torch.Generator().manual_seed(self.seed)
        for _ in range(self.epochs):
            for idx in torch.split(torch.randperm(n, generator=gen), self.batch):
                logits = self.model(feats[idx], self.E[g[idx]], ctx[idx]).masked_fill(~mask[idx], -1e9)
                loss = torch.nn.functional.cross_entropy(logits, y[idx])
                opt.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                opt.step()

    @torch.no_grad()
    def rank_lists(
        self, corpus: ReleasedCorpus, guesses: npt.NDArray[np.int64], scores: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.int64]:
        """Each token's candidates reordered by the model, best first (``-1`` padding last)."""
        assert self.model is not None, "fit the attack first"
        feats = _features(corpus, guesses, scores, self.logp, self.bigram)
        ctx = _context(corpus, self.E, self.window)
        g = torch.from_numpy(np.where(guesses >= 0, guesses, 0))
        mask = torch.from_numpy(guesses >= 0)
        out = np.empty_like(guesses)
        for idx in torch.split(torch.arange(g.shape[0]), 8192):
            logits = self.model(feats[idx], self.E[g[idx]], ctx[idx]).masked_fill(~mask[idx], -torch.inf)
            order = torch.argsort(logits, dim=1, descending=True, stable=True).numpy()
            out[idx.numpy()] = np.take_along_axis(guesses[idx.numpy()], order, axis=1)
        return out
