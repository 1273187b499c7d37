"""The candidate set of a space (space.md §6): the rules of a setting applied to a model's ids, cached on disk.

:func:`restrict_cached` keeps what it derives (the kept ids, the inputs outside C and their nearest candidates,
the piece classes) in the disk cache under the SHA-256 of everything it reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..candidates import CLASS_NAMES, CandidateSpec, is_reserved, piece_classes, piece_text, script_ok
from ..errors import InvalidParameterError
from ..memo import matrix_key
from ..search import ExactIndex
from ..tokens import HFTokens
from ..utils.logging import get_logger
from .cache import DiskCache
from .files import file_sha256
from .frequencies import corpus_texts


__all__ = ["vocab_ids", "restrict", "restrict_cached", "vocab_info"]

logger = get_logger("hf_textdp.io.models")  # the name these lines had before the module was split (issue 53)


def vocab_info(spec: CandidateSpec) -> dict[str, str]:
    """The report's note of the public vocab file: its name and SHA-256."""
    return {"name": Path(str(spec.vocab)).name, "sha256": file_sha256(Path(str(spec.vocab)))}


def vocab_ids(spec: CandidateSpec, backend: str | None, words: list[str] | None) -> set[int]:
    """Ids that occur in the public vocab file, tokenized as privatization tokenizes (space.md §6.1)."""
    assert spec.vocab is not None
    path = Path(spec.vocab).expanduser()
    if not path.is_file():
        raise InvalidParameterError(
            f"candidates: vocab {spec.vocab!r} is not an existing file; allowed: the path of a public text file "
            "(one text or word per line) or a JSON lines file with a 'text' field."
        )
    found: set[int] = set()
    if words is not None:
        index = {w: i for i, w in enumerate(words)}
        for texts in corpus_texts(path, param="candidates vocab"):
            found.update(index[w] for t in texts for w in t.split() if w in index)
        return found
    assert backend is not None
    tokens = HFTokens(backend)
    for texts in corpus_texts(path, param="candidates vocab"):
        flat, _, _ = tokens.encode_flat(texts)
        found.update(np.unique(flat).tolist())
    return found


def _apply_candidates(
    spec: CandidateSpec,
    base: np.ndarray,
    strings: list[str],
    scheme: tuple[str, str],
    vocab: set[int] | None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """The kept subset of the ``base`` ids (whose token strings are ``strings``) and what each rule removed."""
    keep = np.ones(base.size, dtype=bool)
    info: dict[str, Any] = {"setting": spec.set, "scripts": list(spec.script_filter or []) or None}
    if spec.set != "all":
        reserved = np.fromiter((is_reserved(t) for t in strings), dtype=bool, count=base.size)
        info["excluded_reserved"] = int(reserved.sum())
        keep &= ~reserved
    if vocab is not None:
        in_vocab = np.isin(base, np.fromiter(vocab, dtype=np.int64, count=len(vocab)))
        info["excluded_not_in_vocab"] = int((keep & ~in_vocab).sum())
        keep &= in_vocab
    if spec.script_filter:
        ok = np.empty(base.size, dtype=bool)
        for i, t in enumerate(strings):
            has, text = piece_text(t, *scheme)
            ok[i] = (has and text == "") or script_ok(text, spec.script_filter)
        info["excluded_script"] = int((keep & ~ok).sum())
        keep &= ok
    return keep, info


def restrict(
    spec: CandidateSpec,
    base: np.ndarray,
    strings: list[str],
    scheme: tuple[str, str],
    vocab: set[int] | None,
    rows: torch.Tensor,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, dict[str, Any]]:
    """(candidate ids, input ids outside C, their nearest candidate positions, each candidate's piece class
    or ``None``, report info) (space.md §6.5, §7).

    With class-preserving replacement an input outside C is mapped to the nearest candidate of its own
    class; classes are preserved only when every class has at least 2 candidates.
    """
    keep, info = _apply_candidates(spec, base, strings, scheme, vocab)
    cand, outside = base[keep], base[~keep]
    if cand.size < 2:
        raise InvalidParameterError(
            f"candidates={spec.to_value()!r} leaves {cand.size} candidate token(s) of this model; at least 2 "
            "are needed. Use a larger setting (for example 'no_reserved')."
        )
    klass = piece_classes(strings, *scheme) if spec.preserve_classes and scheme[0] != "words" else None
    if klass is not None:
        sizes = np.bincount(klass[keep], minlength=len(CLASS_NAMES))
        if (sizes < 2).any():  # a class of 0 or 1 candidates is no metric space: one space over all of C
            small = ", ".join(f"{CLASS_NAMES[c]} {int(sizes[c])}" for c in np.flatnonzero(sizes < 2))
            info["classes_note"] = f"one space over all of C: a piece class has fewer than 2 candidates ({small})"
            logger.warning("candidates=%r: %s; replacement may cross classes.", spec.to_value(), info["classes_note"])
            klass = None
    info["classes"] = "preserve" if klass is not None else "mix"
    remap = np.empty(0, dtype=np.int64)
    if outside.size:
        remap = np.empty(outside.size, dtype=np.int64)
        groups = [(np.ones(cand.size, bool), np.ones(outside.size, bool))]
        if klass is not None:
            kc, ko = klass[keep], klass[~keep]
            groups = [(kc == c, ko == c) for c in np.unique(ko)]
        for in_c, out_c in groups:
            pos_c = np.flatnonzero(in_c)
            index = ExactIndex(rows[torch.from_numpy(cand[pos_c])].contiguous(), torch.device("cpu"))
            near = index.search(rows[torch.from_numpy(outside[out_c])].contiguous(), 1)[:, 0].cpu().numpy()
            remap[out_c] = pos_c[near.astype(np.int64)]
    info["inputs_outside"] = int(outside.size)
    return cand, outside, remap, (klass[keep] if klass is not None else None), info


#: bump when what :func:`restrict` returns changes, so that older cache entries are not read
_RESTRICT_VERSION = b"restrict-v1"


def restrict_cached(
    spec: CandidateSpec,
    base: np.ndarray,
    strings: list[str],
    scheme: tuple[str, str],
    vocab: set[int] | None,
    rows: torch.Tensor,
    store: DiskCache,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, dict[str, Any]]:
    """:func:`restrict`, kept in ``store`` (kind ``"candidates"``) under the SHA-256 of everything it reads: the
    matrix, the ids and token strings, the piece scheme, the setting and the vocabulary's ids (all public). A
    warm start reads the result instead of checking every token's script and searching the nearest candidate of
    each input outside C (≈ 2 CPU-s for all-MiniLM-L6-v2 with the English default)."""
    inputs = json.dumps([spec.to_value(), list(scheme), sorted(vocab) if vocab is not None else None, strings])
    key = matrix_key(_RESTRICT_VERSION, rows, base.astype("<i8").tobytes(), inputs.encode("utf-8"))
    hit = store.load("candidates", key)
    if hit is not None:
        try:
            klass = None if hit["klass"] is None else np.asarray(hit["klass"], dtype=np.int8)
            if "classes_note" in hit["info"]:
                logger.warning(
                    "candidates=%r: %s; replacement may cross classes.", spec.to_value(), hit["info"]["classes_note"]
                )
            return (
                np.asarray(hit["cand"], dtype=np.int64),
                np.asarray(hit["outside"], dtype=np.int64),
                np.asarray(hit["remap"], dtype=np.int64),
                klass,
                dict(hit["info"]),
            )
        except (KeyError, TypeError, ValueError):  # an unreadable entry: computed again and rewritten
            pass
    cand, outside, remap, klass, info = restrict(spec, base, strings, scheme, vocab, rows)
    value = {
        "cand": cand.tolist(),
        "outside": outside.tolist(),
        "remap": remap.tolist(),
        "klass": None if klass is None else klass.tolist(),
        "info": info,
    }
    store.save("candidates", key, value)
    return cand, outside, remap, klass, info
