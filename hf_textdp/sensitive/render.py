"""``sensitive={"render": "placeholder"}``: each sensitive word released as one placeholder (issue 54 item 5).

The selection is visible in any release (docs/mechanisms/selective.md §7), so replacing each selected word by
one fixed placeholder reveals nothing more; it spares a reader the privatized pieces of an identifier
(``A1973060`` released as ``emergencyherformilityday``). Each sensitive position's id becomes the unknown token's
(static vectors: no word, ``-1``), so ``input_ids`` stay one to one with the input's tokenization and agree with
the text; the text reads the unknown token's form (``[UNK]``; static vectors ``<unk>``) once per word. The
placeholder is untyped: a typed one (``<PHONE>``) would also reveal each detector's verdict.
"""

from __future__ import annotations

from typing import Any

import numpy as np


__all__ = ["placeholder_words"]


def placeholder_words(
    out: np.ndarray, marked: np.ndarray, rows: Any, unk_id: int | None, tokens: Any, texts: list[str]
) -> Any:
    """Set the sensitive positions of ``out`` (the released ids, in place) to the placeholder's id and return
    ``(words, text)`` for :meth:`~hf_textdp.tokens.HFTokens.decode_flat`, from the batch's words (``rows``, a
    ``WordLayout``) and the tokenizer (``tokens``); both ``None`` for static vectors, whose decode releases a
    ``-1`` id as ``<unk>`` (and then ``None`` is returned)."""
    if rows is None or tokens is None:
        out[marked] = -1
        return None
    if unk_id is not None:
        out[marked] = unk_id
    text = tokens.token(unk_id) if unk_id is not None else "<unk>"
    starts, stops = rows.starts, rows.stops
    words = marked[starts] if starts.size else np.zeros(0, dtype=bool)
    # one placeholder per run of sensitive words with no character between them ("ann" "@" "example" ".")
    same_run = np.zeros(words.size, dtype=bool)
    gap = np.zeros(words.size, dtype=bool)  # whitespace before the word (its tokens may hold it: byte-level BPE)
    if words.size and rows.offsets is not None:
        first = np.ones(words.size, dtype=bool)
        first[1:] = rows.rows[1:] != rows.rows[:-1]
        prev_end = np.zeros(words.size, dtype=np.int64)
        prev_end[1:] = rows.offsets[stops[:-1] - 1, 1]
        prev_end[first] = 0
        gap = rows.offsets[starts, 0] > prev_end
        for k in np.flatnonzero(words & ~gap).tolist():  # a token that holds its space starts at the space
            a = int(rows.offsets[starts[k], 0])
            gap[k] = a < len(texts[rows.rows[k]]) and texts[rows.rows[k]][a].isspace()
        same_run[1:] = words[1:] & words[:-1] & ~gap[1:] & ~first[1:]
    spaced = np.where(gap & tokens.spacing_in_tokens, " " + text, text)
    forms = np.where(same_run, "", spaced).astype(object)
    return words, forms
