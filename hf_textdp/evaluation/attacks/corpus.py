"""A corpus released by a privatizer, token by token: the data every attack reads.

Attacks work on the *candidate tokens* of a corpus (the tokens a mechanism rewrites), identified by
their position in the candidate set C (docs/mechanisms/space.md). For each such token the attacker sees
the released position; the truth is the input position, which is what the mechanism received (an input
outside C counts as the candidate it is privatized as). Structural and passthrough tokens are not
privatized and are not scored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ...privatizer import Privatizer
from ...space import CANDIDATE
from ...tokens import make_tokens


__all__ = ["ReleasedCorpus", "release_corpus"]


@dataclass(frozen=True)
class ReleasedCorpus:
    """The candidate tokens of a corpus, flat with rows in order, and what the privatizer released.

    Attributes:
        inputs (`np.ndarray`): ``[N]`` int64 input positions in C (the truth an attacker tries to recover).
        released (`np.ndarray`): ``[N]`` int64 released positions in C (what the attacker sees).
        row_sizes (`np.ndarray`): ``[n_rows]`` candidate tokens per row.
        texts (`list[str]`): the released texts (empty unless asked for).
    """

    inputs: npt.NDArray[np.int64]
    released: npt.NDArray[np.int64]
    row_sizes: npt.NDArray[np.int64]
    texts: list[str]

    @property
    def n_rows(self) -> int:
        return int(self.row_sizes.size)

    @property
    def row_of(self) -> npt.NDArray[np.int64]:
        """The row of each token."""
        return np.repeat(np.arange(self.n_rows, dtype=np.int64), self.row_sizes)

    @property
    def starts(self) -> npt.NDArray[np.int64]:
        """Each row's first token in the flat arrays (``[n_rows + 1]``, the last entry is ``N``)."""
        out = np.zeros(self.n_rows + 1, dtype=np.int64)
        np.cumsum(self.row_sizes, out=out[1:])
        return out

    def replacement_rate(self) -> float:
        return float(np.mean(self.inputs != self.released)) if self.inputs.size else 0.0


def release_corpus(
    priv: Privatizer,
    texts: Sequence[str],
    *,
    batch_rows: int = 1000,
    keep_texts: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> ReleasedCorpus:
    """Privatize ``texts`` (row ids 0…n−1, the privatizer's own key) and pair each token's input with its release.

    The privatizer tokenizes as it always does; the released ids are one to one with the input's
    tokenization, so the candidate tokens line up position by position.
    """
    space = priv.engine.space
    tokens = make_tokens(space)
    inputs, released, sizes, out_texts = [], [], [], []
    texts = list(texts)
    for start in range(0, len(texts), batch_rows):
        batch = texts[start : start + batch_rows]
        out = priv({priv.text_column: batch}, list(range(start, start + len(batch))))
        flat, lengths, _ = tokens.encode_flat(batch)
        cls, pos = space.classify(flat)
        cand = cls == CANDIDATE
        out_flat = np.fromiter((t for ids in out["input_ids"] for t in ids), dtype=np.int64, count=flat.size)
        _, out_pos = space.classify(out_flat)
        inputs.append(pos[cand])
        released.append(out_pos[cand])
        row_of = np.repeat(np.arange(len(batch), dtype=np.int64), lengths)
        sizes.append(np.bincount(row_of[cand], minlength=len(batch)))
        if keep_texts:
            out_texts.extend(out[priv.text_column])
        if progress is not None:
            progress(start + len(batch), len(texts))
    cat = np.concatenate
    empty = np.zeros(0, dtype=np.int64)
    return ReleasedCorpus(
        inputs=cat(inputs).astype(np.int64) if inputs else empty,
        released=cat(released).astype(np.int64) if released else empty,
        row_sizes=cat(sizes).astype(np.int64) if sizes else empty,
        texts=out_texts,
    )
