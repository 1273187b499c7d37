"""Inversion as token classification: an encoder and a full-vocabulary head read the released row (docs/attacks.md §3).

Privatization is one to one per position, so inversion is token classification: for every candidate
token of a released row, predict the input among all of C. The adversary privatizes public text
with the same mechanism, options and candidates under a key of their own, and trains on the
(released row → input positions) pairs:

- the encoder is the release's own model (``AutoModel``, loaded offline; every layer trained), or any
  Hugging Face encoder with the same tokenizer;
- the head is a linear layer from the encoder's hidden state to the |C| candidates, initialised from
  the encoder's input embedding rows of C (as a tied masked-LM decoder), plus one learned *copy*
  weight added to the logit of the released token itself (the identity guess is one weight away);
- ε is an input: ``log ε / 10`` through a linear layer, added to every input embedding (zero at
  the start), so one model can be trained on pairs pooled over several ε of a family.

Training is Adam with cross-entropy over the candidate tokens, in length-grouped batches (as
``transformers``' ``group_by_length``), for at most ``epochs`` epochs, and
stops early when the loss plateaus: every ``check_every`` steps the mean loss of those steps is
compared with the previous block's, and training stops after ``patience`` blocks that improve it by
less than ``plateau`` (relative). The mean loss of every block (the loss curve) and the loss of every step
are kept. With ``bf16`` the encoder and head run under bfloat16 autocast where the CPU has native bf16
arithmetic (AVX-512 BF16, AMX; about 1.4× faster on the default model), in float32 elsewhere; the
weights and the optimiser stay float32 (the record says which ran).

A trained attack is saved with :meth:`InversionAttack.save` and read back with :meth:`InversionAttack.load`
(weights and training summary; the attack recipes keep them in the cache, keyed by what they were trained on).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ...cpu.features import native_bf16
from ...io.files import atomic_open
from .corpus import ReleasedCorpus


__all__ = ["InversionBudget", "InversionAttack", "eps_feature", "load_encoder"]


@dataclass(frozen=True)
class InversionBudget:
    """What the inversion attacker spends (module docstring).

    Attributes:
        rows (`int`): public rows privatized for training (pooled over the ε of the pool, if any).
        epochs (`int`): at most this many passes over them.
        max_length (`int`): tokens per training window (longer rows are cut into windows).
        lr (`float`): the encoder's Adam learning rate; the head's is ``head_lr``, the copy weight's 0.2.
        head_lr (`float`): the head's and the ε layer's learning rate.
        batch_rows (`int`): windows per step.
        check_every (`int`), plateau (`float`), patience (`int`): the convergence criterion.
        max_minutes (`float`, *optional*): stop training after this long (the curve says so).
        bf16 (`bool`): bfloat16 autocast where the CPU has it natively (module docstring).
    """

    rows: int = 4000
    epochs: int = 4
    max_length: int = 64
    lr: float = 1e-4
    head_lr: float = 2e-3
    batch_rows: int = 32
    check_every: int = 25
    plateau: float = 0.01
    patience: int = 3
    max_minutes: float | None = None
    bf16: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def eps_feature(epsilon: float) -> float:
    """The ε input: ``log(ε)/10``, ε capped at 10⁶ (ε = ∞ in test mode reads as 10⁶)."""
    return math.log(min(max(float(epsilon), 1e-6), 1e6)) / 10.0


def load_encoder(model: str) -> Any:
    """The Hugging Face encoder of ``model`` (a folder, a hub id in the local cache, or the default package)."""
    from transformers import AutoModel

    from ...io.models import resolve_model

    kind, path, _ = resolve_model(model, local_only=True)
    if kind != "folder":
        from ...errors import InvalidParameterError

        raise InvalidParameterError(
            f"inversion: model={model!r} is a vector file; the inversion attack needs a Hugging Face encoder "
            "(a folder or hub id)."
        )
    return AutoModel.from_pretrained(str(path))


class _Inverter(torch.nn.Module):
    def __init__(self, encoder: Any, candidate_ids: torch.Tensor) -> None:
        super().__init__()
        self.encoder = encoder
        emb = encoder.get_input_embeddings().weight
        hidden = int(emb.shape[1])
        self.head = torch.nn.Linear(hidden, int(candidate_ids.numel()))
        self.eps = torch.nn.Linear(1, hidden)
        self.copy = torch.nn.Parameter(torch.zeros(()))
        with torch.no_grad():
            self.head.weight.copy_(emb[candidate_ids])
            self.head.bias.zero_()
            self.eps.weight.zero_()
            self.eps.bias.zero_()

    def forward(
        self, ids: torch.Tensor, mask: torch.Tensor, eps: torch.Tensor, sel: torch.Tensor, released: torch.Tensor
    ) -> torch.Tensor:
        """Logits over C at the selected (flat ``B·L``) positions, the released token's raised by ``copy``."""
        emb = self.encoder.get_input_embeddings()(ids) + self.eps(eps[:, None])[:, None, :]
        h = self.encoder(inputs_embeds=emb, attention_mask=mask).last_hidden_state
        logits: torch.Tensor = self.head(h.reshape(-1, h.shape[-1])[sel])
        bonus = torch.zeros_like(logits).scatter_(1, released[:, None], 1.0)
        return logits + self.copy * bonus


@dataclass
class _Windows:
    """Rows cut into windows: ids, where the candidate tokens are, their truth and release, and the ε feature."""

    ids: list[npt.NDArray[np.int64]] = field(default_factory=list)
    at: list[npt.NDArray[np.int64]] = field(default_factory=list)
    truth: list[npt.NDArray[np.int64]] = field(default_factory=list)
    released: list[npt.NDArray[np.int64]] = field(default_factory=list)
    flat: list[npt.NDArray[np.int64]] = field(default_factory=list)  # the tokens' indices in the corpus
    eps: list[float] = field(default_factory=list)

    def add(self, corpus: ReleasedCorpus, epsilon: float, max_length: int, rows: int | None = None) -> None:
        if corpus.rows is None:
            raise ValueError("the inversion attack needs the corpus's rows (release_corpus(keep_rows=True))")
        starts = corpus.starts
        f = eps_feature(epsilon)
        n = corpus.n_rows if rows is None else min(rows, corpus.n_rows)
        for r in range(n):
            ids, at = corpus.rows.ids[r], corpus.rows.cand_at[r]
            tok = np.arange(starts[r], starts[r + 1])
            for a in range(0, max(ids.size, 1), max_length):
                inside = (at >= a) & (at < a + max_length)
                if not inside.any():
                    continue
                self.ids.append(ids[a : a + max_length])
                self.at.append(at[inside] - a)
                self.truth.append(corpus.inputs[tok[inside]])
                self.released.append(corpus.released[tok[inside]])
                self.flat.append(tok[inside])
                self.eps.append(f)

    def __len__(self) -> int:
        return len(self.ids)

    def batch(self, idx: Sequence[int], pad_id: int) -> tuple[torch.Tensor, ...]:
        L = max(self.ids[i].size for i in idx)
        ids = np.full((len(idx), L), pad_id, dtype=np.int64)
        mask = np.zeros((len(idx), L), dtype=np.int64)
        sel = []
        for b, i in enumerate(idx):
            ids[b, : self.ids[i].size] = self.ids[i]
            mask[b, : self.ids[i].size] = 1
            sel.append(b * L + self.at[i])
        return (
            torch.from_numpy(ids),
            torch.from_numpy(mask),
            torch.tensor([self.eps[i] for i in idx], dtype=torch.float32),
            torch.from_numpy(np.concatenate(sel)),
            torch.from_numpy(np.concatenate([self.released[i] for i in idx])),
            torch.from_numpy(np.concatenate([self.truth[i] for i in idx])),
        )


def _length_grouped(
    gen: np.random.Generator, lengths: npt.NDArray[np.int64], size: int
) -> list[npt.NDArray[np.int64]]:
    """One epoch's batches of ``size`` windows, as ``transformers``' ``group_by_length``: a random order, cut
    into mega-batches of 50 batches each sorted by length (a batch pads little), the batches then shuffled."""
    order = gen.permutation(lengths.size)
    mega = 50 * size
    order = np.concatenate(
        [m[np.argsort(-lengths[m], kind="stable")] for m in np.split(order, np.arange(mega, order.size, mega))]
    )
    batches = [order[a : a + size] for a in range(0, order.size, size)]
    return [batches[i] for i in gen.permutation(len(batches))]


@dataclass
class InversionAttack:
    """The trained inverter (module docstring); :meth:`fit` then :meth:`predict`."""

    encoder: Any
    candidate_ids: torch.Tensor
    pad_id: int = 0
    budget: InversionBudget = field(default_factory=InversionBudget)
    seed: int = 0
    model: _Inverter | None = None
    curve: list[dict[str, float]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def precision(self) -> str:
        """``"bf16"`` when the budget asks for it and the CPU has native bf16 arithmetic, else ``"fp32"``."""
        return "bf16" if self.budget.bf16 and native_bf16() else "fp32"

    @contextlib.contextmanager
    def _autocast(self) -> Iterator[None]:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.precision() == "bf16"):
            yield

    def fit(
        self, corpora: Sequence[tuple[ReleasedCorpus, float]], progress: Callable[[str], None] | None = None
    ) -> dict[str, Any]:
        """Train on attacker-privatized public corpora, each with its ε; returns the training summary."""
        say = progress or (lambda _m: None)
        b = self.budget
        torch.manual_seed(self.seed)
        self.model = _Inverter(self.encoder, self.candidate_ids)
        self.model.train()
        data = _Windows()
        per = max(1, b.rows // max(len(corpora), 1))
        for corpus, eps in corpora:
            data.add(corpus, eps, b.max_length, per)
        head = [*self.model.head.parameters(), *self.model.eps.parameters()]
        opt = torch.optim.Adam(
            [
                {"params": list(self.model.encoder.parameters()), "lr": b.lr},
                {"params": head, "lr": b.head_lr},
                {"params": [self.model.copy], "lr": 0.2},
            ]
        )
        gen = np.random.default_rng(self.seed)
        t0 = time.perf_counter()
        self.curve, stop = [], ""
        block: list[float] = []
        losses: list[float] = []
        best_blocks, step, epoch, prev = 0, 0, 0, math.inf
        n_tokens = int(sum(t.size for t in data.truth))
        lengths = np.array([w.size for w in data.ids])
        for epoch in range(b.epochs):
            for batch in _length_grouped(gen, lengths, b.batch_rows):
                ids, mask, eps_in, sel, rel, truth = data.batch(batch.tolist(), self.pad_id)
                with self._autocast():
                    logits = self.model(ids, mask, eps_in, sel, rel)
                loss = torch.nn.functional.cross_entropy(logits.float(), truth)
                opt.zero_grad()
                loss.backward()  # type: ignore[no-untyped-call]
                opt.step()
                step += 1
                block.append(loss.item())
                losses.append(round(block[-1], 4))
                if len(block) == b.check_every:
                    mean = float(np.mean(block))
                    self.curve.append({"step": step, "epoch": epoch + 1, "loss": mean, "s": time.perf_counter() - t0})
                    say(f"inversion step {step}: loss {mean:.3f} ({time.perf_counter() - t0:.0f} s)")
                    best_blocks = best_blocks + 1 if prev - mean < b.plateau * prev else 0
                    prev, block = min(prev, mean), []
                    if best_blocks >= b.patience:
                        stop = (
                            f"plateau: {b.patience} blocks of {b.check_every} steps improved the loss < {b.plateau:g}"
                        )
                    elif b.max_minutes is not None and time.perf_counter() - t0 > 60 * b.max_minutes:
                        stop = f"time: {b.max_minutes:g} minutes"
                if stop:
                    break
            if stop:
                break
        if block:
            self.curve.append(
                {"step": step, "epoch": epoch + 1, "loss": float(np.mean(block)), "s": time.perf_counter() - t0}
            )
        self.model.eval()
        self.info = {
            "model": "encoder (all layers trained) + linear head over the |C| candidates + copy weight + ε input",
            "budget": b.to_dict(),
            "train_windows": len(data),
            "train_tokens": n_tokens,
            "steps": step,
            "epochs_run": epoch + 1,
            "stopped": stop or f"epochs: {b.epochs}",
            "final_loss": self.curve[-1]["loss"] if self.curve else None,
            "train_s": time.perf_counter() - t0,
            "loss_curve": self.curve,
            "step_losses": losses,
            "copy_weight": self.model.copy.item(),
            "precision": self.precision(),
        }
        return self.info

    def save(self, path: str | Path) -> None:
        """Write the trained weights and the training summary to ``path`` (atomically)."""
        assert self.model is not None, "fit the attack first"
        with atomic_open(path, "wb") as f:
            torch.save({"state": self.model.state_dict(), "info": self.info}, f)

    def load(self, path: str | Path) -> dict[str, Any]:
        """Read what :meth:`save` wrote (for the same encoder and candidates); returns the training summary."""
        saved = torch.load(path, map_location="cpu", weights_only=True)
        self.model = _Inverter(self.encoder, self.candidate_ids)
        self.model.load_state_dict(saved["state"])
        self.model.eval()
        self.info = dict(saved["info"])
        self.curve = list(self.info.get("loss_curve", []))
        return self.info

    @torch.no_grad()
    def predict(self, corpus: ReleasedCorpus, epsilon: float, k: int = 5) -> npt.NDArray[np.int64]:
        """``[N, k]`` each candidate token's best inputs, best first (the rows cut into windows of ``max_length``)."""
        assert self.model is not None, "fit the attack first"
        data = _Windows()
        data.add(corpus, epsilon, self.budget.max_length)
        out = np.full((corpus.inputs.size, k), -1, dtype=np.int64)
        order = np.argsort([w.size for w in data.ids], kind="stable")  # similar lengths together: less padding
        for a in range(0, len(order), 2 * self.budget.batch_rows):
            idx = order[a : a + 2 * self.budget.batch_rows].tolist()
            ids, mask, eps, sel, rel, _ = data.batch(idx, self.pad_id)
            with self._autocast():
                logits = self.model(ids, mask, eps, sel, rel).float()
            top = torch.topk(logits, min(k, int(self.candidate_ids.numel())), dim=1)
            out[np.concatenate([data.flat[i] for i in idx]), : top.indices.shape[1]] = top.indices.numpy()
        return out
