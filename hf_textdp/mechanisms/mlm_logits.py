"""A masked LM's logits at privatized positions, batched across positions and rows (dp_mlm.md §4).

Two context modes (dp_mlm.md §3):

- ``"each"``: for privatized token i, its row with position i replaced by the mask token (the DP-MLM
  paper's input, without its concatenated copy of the sentence); one sequence per token;
- ``"once"``: the row as it is; one sequence per row, every privatized position read from it.

A row longer than the model's ``max_length`` is cut into windows that keep its leading and trailing
template specials: in ``"each"`` a window centred on the token, in ``"once"`` consecutive windows. The
sequences of a batch are sorted by length and run ``batch_tokens`` padded ids per forward under
``torch.no_grad``; the LM head runs only on the positions that are read (``head_rows`` at a time),
never on the whole ``[B, L, V]`` output. Padding is masked, so a sequence's logits do not depend on the
batch beyond the last-ulp rounding of its matrix products.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from .context import RowContext


__all__ = ["MaskedLMScorer", "split_head"]

#: positions per LM-head call: [HEAD_ROWS, V] fp32 logits (50k vocabulary: 100 MB)
HEAD_ROWS = 512


def split_head(model: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """``(encoder, head)`` of a ``*ForMaskedLM`` whose only other child is its LM head (BERT ``cls``, RoBERTa
    ``lm_head``, DeBERTa ``cls``), so that the head runs on the read positions only; ``None`` otherwise."""
    prefix = str(getattr(model, "base_model_prefix", "") or "")
    base = getattr(model, prefix, None) if prefix else None
    if not isinstance(base, nn.Module):
        return None
    others = [m for m in model.children() if m is not base and not isinstance(m, nn.modules.loss._Loss)]
    if len(others) != 1:
        return None
    return base, others[0]


class MaskedLMScorer:
    """Logits of a masked LM at privatized positions of a batch's rows.

    Args:
        model (`torch.nn.Module`): a ``*ForMaskedLM`` in eval mode, on its device.
        mask_id (`int`): the tokenizer's mask token id.
        pad_id (`int`): the id that pads sequences of a forward (masked out by the attention mask).
        special_ids (`frozenset[int]`): template special ids, kept at a window's ends.
        max_length (`int`): the most ids one sequence may hold (position embeddings).
        batch_tokens (`int`): padded ids per forward (memory only: outputs do not depend on it beyond rounding).
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        mask_id: int,
        pad_id: int,
        special_ids: frozenset[int],
        max_length: int,
        batch_tokens: int = 8192,
    ) -> None:
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.mask_id = int(mask_id)
        self.pad_id = int(pad_id)
        self.special_ids = special_ids
        self.max_length = int(max_length)
        self.batch_tokens = int(batch_tokens)
        self._parts = split_head(model)

    # ---------------------------------------------------------------- sequences
    def _window(self, row: list[int], j: int, centred: bool) -> tuple[list[int], int, int]:
        """``(ids, position of j in them, window start)``: the row, or a window of it holding index ``j``."""
        L = len(row)
        if L <= self.max_length:
            return row, j, 0
        head = 1 if row[0] in self.special_ids else 0
        tail = 1 if row[-1] in self.special_ids and L - 1 > head else 0
        inner = row[head : L - tail]
        m = max(1, self.max_length - head - tail)
        k = j - head
        if centred:
            lo = min(max(0, k - m // 2), max(0, len(inner) - m))
        else:
            lo = (k // m) * m
        ids = row[:head] + inner[lo : lo + m] + row[L - tail :]
        return ids, head + k - lo, lo

    def _sequences(self, ctx: RowContext, mode: str) -> list[tuple[list[int], list[int], list[int]]]:
        """``(ids, read positions, token indices)`` per sequence of the batch."""
        rows = ctx.ids.tolist()
        starts, lengths = ctx.starts.tolist(), ctx.lengths.tolist()
        cache: dict[int, list[int]] = {}

        def row_of(r: int) -> list[int]:
            if r not in cache:
                cache[r] = rows[starts[r] : starts[r] + lengths[r]]
            return cache[r]

        seqs: list[tuple[list[int], list[int], list[int]]] = []
        if mode == "each":
            for t, (r, j) in enumerate(zip(ctx.row.tolist(), ctx.index.tolist(), strict=True)):
                ids, p, _ = self._window(row_of(r), j, centred=True)
                ids = list(ids)
                ids[p] = self.mask_id
                seqs.append((ids, [p], [t]))
            return seqs
        groups: dict[tuple[int, int], tuple[list[int], list[int], list[int]]] = {}
        for t, (r, j) in enumerate(zip(ctx.row.tolist(), ctx.index.tolist(), strict=True)):
            ids, p, lo = self._window(row_of(r), j, centred=False)
            entry = groups.setdefault((r, lo), (ids, [], []))
            entry[1].append(p)
            entry[2].append(t)
        return list(groups.values())

    # ---------------------------------------------------------------- forwards
    def logits(self, ctx: RowContext, mode: str) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Yield ``(tokens [n] int64, logits [n, V] fp32)`` on the model's device until every token of ``ctx`` is
        covered once (``tokens``: indices into ``ctx``'s tokens).

        In ``"once"`` mode the encoder runs once per batch: its outputs at every privatized token of the batch
        are kept in ``ctx.memo``, and each part of the batch (a piece class) runs the head on its own tokens.
        """
        if mode == "once" and self._parts is not None:
            hidden = self._batch_hidden(ctx)[ctx.token.to(self.device)]
            head = self._parts[1]
            with torch.no_grad():
                for a in range(0, int(hidden.shape[0]), HEAD_ROWS):
                    rows = torch.arange(a, min(a + HEAD_ROWS, int(hidden.shape[0])), device=self.device)
                    yield rows, head(hidden[a : a + HEAD_ROWS]).float()
            return
        for seqs in self._chunks(self._sequences(ctx, mode)):
            yield from self._forward(seqs)

    def _chunks(
        self, seqs: list[tuple[list[int], list[int], list[int]]]
    ) -> Iterator[list[tuple[list[int], list[int], list[int]]]]:
        """The sequences sorted by length, cut into forwards of at most ``batch_tokens`` padded ids (at least one)."""
        seqs = sorted(seqs, key=lambda s: len(s[0]))
        i = 0
        while i < len(seqs):
            # sorted by length: the chunk's padded size is (count) x (its last sequence's length)
            k = i + 1
            while k < len(seqs) and (k - i + 1) * len(seqs[k][0]) <= self.batch_tokens:
                k += 1
            yield seqs[i:k]
            i = k

    def _batch_hidden(self, ctx: RowContext) -> torch.Tensor:
        """The encoder's outputs ``[N, h]`` at every privatized token of ``ctx``'s whole batch (computed once)."""
        key = f"once:{id(self.model)}"
        if key not in ctx.memo:
            row, index = ctx.memo["tokens"]
            whole = RowContext(ctx.ids, ctx.starts, ctx.lengths, row, index, torch.arange(row.numel()), ctx.memo)
            out: torch.Tensor | None = None
            for seqs in self._chunks(self._sequences(whole, "once")):
                tokens, hidden = self._encode(seqs)
                if out is None:
                    out = torch.empty((len(whole), hidden.shape[1]), dtype=hidden.dtype, device=self.device)
                out[tokens] = hidden
            assert out is not None
            ctx.memo[key] = out
        hidden_all: torch.Tensor = ctx.memo[key]
        return hidden_all

    def _encode(self, seqs: list[tuple[list[int], list[int], list[int]]]) -> tuple[torch.Tensor, torch.Tensor]:
        """The encoder's outputs ``[n, h]`` at the read positions of one forward, with their tokens ``[n]``."""
        assert self._parts is not None
        ids, mask, b_idx, p_idx, tokens = self._pack(seqs)
        with torch.no_grad():
            hidden = self._parts[0](input_ids=ids, attention_mask=mask)[0]
        return tokens, hidden[b_idx, p_idx]

    def _pack(
        self, seqs: list[tuple[list[int], list[int], list[int]]]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Padded ids and mask ``[B, L]``, and the (sequence, position, token) of each read, on the device."""
        L = max(len(s[0]) for s in seqs)
        ids = torch.full((len(seqs), L), self.pad_id, dtype=torch.int64)
        mask = torch.zeros((len(seqs), L), dtype=torch.int64)
        for b, (s, _, _) in enumerate(seqs):
            ids[b, : len(s)] = torch.tensor(s, dtype=torch.int64)
            mask[b, : len(s)] = 1
        b_idx = torch.tensor([b for b, s in enumerate(seqs) for _ in s[1]], dtype=torch.int64)
        p_idx = torch.tensor([p for s in seqs for p in s[1]], dtype=torch.int64)
        tokens = torch.tensor([t for s in seqs for t in s[2]], dtype=torch.int64)
        dev = self.device
        return ids.to(dev), mask.to(dev), b_idx.to(dev), p_idx.to(dev), tokens.to(dev)

    def _forward(
        self, seqs: list[tuple[list[int], list[int], list[int]]]
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._parts is not None:
            tokens, sel = self._encode(seqs)
            with torch.no_grad():
                for a in range(0, int(sel.shape[0]), HEAD_ROWS):
                    yield tokens[a : a + HEAD_ROWS], self._parts[1](sel[a : a + HEAD_ROWS]).float()
            return
        # an architecture without a separable head: the full output, read at the positions
        ids, mask, b_idx, p_idx, tokens = self._pack(seqs)
        with torch.no_grad():
            full = self.model(input_ids=ids, attention_mask=mask).logits
        yield tokens, full[b_idx, p_idx].float()
