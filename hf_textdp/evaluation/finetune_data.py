"""The rows of a full fine-tune (finetune_full.py) and their privatized ids: a split's texts, labels and clean
ids, the private ids cut as the tokenizer cuts the clean ones, and the count of positions the noise changed
(the replacement rate), for ids privatized once and for a privatizing collator's batches."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..config import PrivatizerConfig


__all__ = ["CountingCollator", "Split", "changed_positions", "privatize_split", "truncate"]


@dataclass
class Split:
    """A task split: its texts, labels and clean token ids."""

    texts: list[str]
    labels: list[int]
    ids: list[list[int]]  # clean token ids, truncated to max_length


def truncate(ids: Sequence[int], max_length: int) -> list[int]:
    """Cut a privatized row as the tokenizer cuts the clean one: keep the first tokens and the final special."""
    ids = list(ids)
    return ids if len(ids) <= max_length else ids[: max_length - 1] + ids[-1:]


def changed_positions(clean: list[list[int]], private: list[list[int]]) -> tuple[int, int]:
    """(changed, privatized) positions, leaving out the first and last (special) tokens."""
    changed = total = 0
    for a, b in zip(clean, private, strict=True):
        changed += sum(x != y for x, y in zip(a[1:-1], b[1:-1], strict=False))
        total += max(len(a) - 2, 0)
    return changed, total


class CountingCollator:
    """Wraps a privatizing collator and counts, per batch, the positions whose id the noise changed."""

    def __init__(self, inner: Any, clean: list[list[int]]) -> None:
        self.inner = inner
        self.clean = clean
        self.changed = 0
        self.total = 0

    def __call__(self, features: list[dict[str, Any]]) -> Any:
        batch = self.inner(features)
        private = [row.tolist() for row in batch["input_ids"]]
        refs = [self.clean[int(f["idx"])] for f in features]
        c, t = changed_positions(refs, [p[: len(r)] for p, r in zip(private, refs, strict=True)])
        self.changed += c
        self.total += t
        return batch


def privatize_split(
    split: Split, config: PrivatizerConfig, seed: int, name: str, max_length: int
) -> tuple[list[list[int]], float]:
    """``privatize_dataset`` of one split (noise key = ``name``): truncated private ids and the max row ε."""
    from datasets import Dataset

    from ..run.pipeline import privatize_dataset

    ds = Dataset.from_dict({"text": split.texts})
    # public benchmark data with public seeds (1111, ...): not a privacy key; never reuse them on private data
    out = privatize_dataset(ds, config, split=name, seed=seed, allow_weak_seed=True)
    ids = [truncate(r, max_length) for r in out["input_ids"]]
    return ids, float(max(out["dp_epsilon"]))
