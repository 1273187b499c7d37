"""``PrivateEncoder``: a fast tokenizer and a :class:`~hf_textdp.release.ReleaseEngine`, the engine behind
:class:`~hf_textdp.PrivateTokenizer` and the collators.

How a call works: the wrapped tokenizer encodes the input twice, once exactly as asked (truncation,
padding, overflow, ``return_*`` flags) and once whole. Every sequence token that the first encoding
keeps is located in the whole encoding (by sequence, token id and offsets), the candidate positions
among them go through the engine's mechanism and post-processing (one keyed stream per example), and
the privatized ids replace the sequence tokens (:meth:`PrivateEncoder.encode`: tokenize, align,
release, assemble).
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoTokenizer

from ..config import PrivatizerConfig
from ..errors import InvalidParameterError, ParameterTypeError, TokenizerNotSupportedError
from ..io.models import resolve_model
from ..mechanisms.base import AdditiveMechanism
from ..release import ReleaseEngine
from ..rng import fresh_seed, streams_for_rows, validate_secret_seed, validate_split, validate_stream
from ..space import CANDIDATE, STRUCTURAL, EmbeddingSpace
from ..tokens import text_fault
from ..validation import check_row_ids


__all__ = ["PrivateEncoder", "EncoderFacade", "EncodedBatch", "load_tokenizer"]

# call arguments that shape the output; the whole (reference) encoding drops them
_SHAPING = (
    "truncation",
    "max_length",
    "stride",
    "padding",
    "pad_to_multiple_of",
    "padding_side",
    "return_overflowing_tokens",
    "return_tensors",
)
_NO_TRUNCATION = (None, False, "do_not_truncate")
_REFUSED = ("text_target", "text_pair_target")


@dataclass
class EncodedBatch:
    """What one privatizing call produced (internal; shared with the collators).

    ``data`` holds the plain tokenizer's batched columns (lists) with ``input_ids`` privatized;
    ``vectors[j]`` (vector release only) holds the noisy vectors of output row j, ``[n_j, k]``, for
    the positions ``released[j]``; ``dp_tokens[j]`` counts the privatized positions kept in row j.
    """

    data: dict[str, Any]
    encodings: list[Any]
    batched: bool
    sample: list[int]
    released: list[np.ndarray]
    vectors: list[torch.Tensor] | None
    dp_tokens: list[int]
    example_dp_tokens: list[int]
    example_counts: list[tuple[int, int, int]]  # (special, padding, passthrough) per example


@dataclass
class _Call:
    """One call's input, made batched, and the tokenizer's plain encoding of it."""

    text: list[Any]
    text_pair: list[Any] | None
    kwargs: dict[str, Any]  # the tokenizer's arguments without return_tensors
    return_tensors: Any
    batched: bool
    plain: Any = None
    encodings: Any = None

    @property
    def overflow(self) -> bool:
        return bool(self.kwargs.get("return_overflowing_tokens", False))


@dataclass
class _Released:
    """Per example: the whole encoding's ids with privatized ids placed, the index of each whole position in the
    example's released list (-1 where none) and the released ids or vectors."""

    new_whole: list[np.ndarray]
    index_of: list[np.ndarray]
    released: list[torch.Tensor]
    example_dp_tokens: list[int]


class PrivateEncoder:
    """A fast tokenizer and the release engine of ``config`` under ``(seed, split, stream)``.

    Args:
        tokenizer: a fast tokenizer, a folder or hub id to load it from, or `None` for ``config.model``'s.
        config (`PrivatizerConfig`): the release (selective privatization is refused: this call tokenizes and
            truncates itself, so there are no character spans to select with).
        seed, split, stream, allow_weak_seed: the noise key, as for :class:`~hf_textdp.Privatizer`.

    Attributes:
        engine (`ReleaseEngine`): the release (lazy: the model loads on first use; built again after unpickling).
    """

    def __init__(
        self,
        tokenizer: Any,
        config: PrivatizerConfig,
        seed: int | None = None,
        *,
        split: str = "",
        stream: int = 0,
        allow_weak_seed: bool = False,
    ) -> None:
        if not isinstance(config, PrivatizerConfig):
            raise ParameterTypeError(f"config must be a PrivatizerConfig, got {type(config).__name__}.")
        if config.sensitive is not None:  # it tokenizes and truncates itself: no character spans to select with
            raise InvalidParameterError(
                "config.sensitive: PrivateTokenizer and the privatizing collators do not support selective "
                "privatization; privatize the dataset first (privatize_dataset or Privatizer with Dataset.map) and "
                "tokenize its output."
            )
        self.config = config
        self.seed = validate_secret_seed(seed, allow_weak_seed=allow_weak_seed)
        self.split = validate_split(split)
        self.stream = validate_stream(stream)
        self._source: str | None = None
        self._tokenizer: Any = None
        self._given = False  # a tokenizer object from the caller travels in the pickle; a path or None does not
        if tokenizer is None:
            pass  # the model's own tokenizer, loaded lazily from config.model
        elif isinstance(tokenizer, (str, Path)):
            self._source = str(tokenizer)
        else:
            if not getattr(tokenizer, "is_fast", False) or not hasattr(tokenizer, "backend_tokenizer"):
                raise TokenizerNotSupportedError(
                    f"tokenizer: {type(tokenizer).__name__} is not a fast (Rust-backed) tokenizer; hf-textdp needs "
                    "one (load it with AutoTokenizer.from_pretrained(..., use_fast=True))."
                )
            self._tokenizer = tokenizer
            self._given = True
        self._nonce = secrets.token_hex(16) if self.seed is None else None
        self._init_runtime()

    def _init_runtime(self) -> None:
        # the seed was checked at construction (the flag is not pickled, like the Privatizer's own)
        self.engine = ReleaseEngine(self.config, self.seed, self.split, self.stream)
        self._checked = False

    # ---------------------------------------------------------------- pickling (decision D4)
    def __getstate__(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "seed": self.seed,
            "nonce": self._nonce,
            "split": self.split,
            "stream": self.stream,
            "source": self._source,
            "tokenizer": self._tokenizer if self._given else None,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.config = PrivatizerConfig(**state["config"])
        self.seed = state["seed"]
        self._nonce = state["nonce"]
        self.split = state["split"]
        self.stream = state["stream"]
        self._source = state["source"]
        self._tokenizer = state["tokenizer"]
        self._given = self._tokenizer is not None
        self._init_runtime()

    # ---------------------------------------------------------------- the tokenizer
    def _model_tokenizer(self) -> Any:
        """The tokenizer of ``config.model``'s space (refused for a static word-vector file)."""
        space = self.engine.space
        if space.kind != "hf" or space.tokenizer is None:
            raise TokenizerNotSupportedError(
                f"config.model={self.config.model!r} is a static word-vector file; PrivateTokenizer and the "
                "collators need a Hugging Face model (its tokenizer and embedding matrix)."
            )
        return space.tokenizer

    @property
    def tokenizer(self) -> Any:
        """The fast tokenizer (the caller's, the one loaded from its path, or a copy of ``config.model``'s)."""
        if self._tokenizer is None:
            # a copy: calls change the backend's truncation/padding state, the space's tokenizer is shared
            source = self._source
            self._tokenizer = copy.deepcopy(self._model_tokenizer()) if source is None else load_tokenizer(source)
        return self._tokenizer

    def check(self) -> None:
        """Check once that the tokenizer produces the ids of ``config.model``'s embedding space."""
        if self._checked:
            return
        tok, own = self.tokenizer, self._model_tokenizer()
        if tok is not own and tok.get_vocab() != own.get_vocab():
            raise TokenizerNotSupportedError(
                f"tokenizer: its vocabulary ({len(tok)} tokens) differs from the tokenizer of "
                f"config.model={self.config.model!r} ({len(own)} tokens); the privatized ids would index "
                "the wrong embedding rows. Use the model's own tokenizer or set PrivatizerConfig(model=...) to it."
            )
        self._checked = True

    def vector_width(self) -> int:
        """k of the released vectors (postprocess="vector"), from one draw on a public candidate."""
        engine = self.engine
        mech, step, space = engine.mechanism, engine.step, engine.space
        if step is None or not step.RELEASES_VECTORS:
            raise InvalidParameterError(
                f"postprocess={self.config.postprocess!r} releases token ids; inputs_embeds need postprocess='vector'."
            )
        st = streams_for_rows([fresh_seed()], [1], space.device)  # a public token's draw, discarded
        assert isinstance(mech, AdditiveMechanism)
        pos = torch.zeros(1, dtype=torch.int64)
        z = mech.perturb(mech.inputs(space, pos), st)
        return int(step.apply(z, mech, space, st).shape[1])

    # ---------------------------------------------------------------- the work
    def encode(
        self,
        text: Any,
        text_pair: Any = None,
        *,
        row_ids: Sequence[Any] | None,
        stream: int | None = None,
        vectors: bool = False,
        **kwargs: Any,
    ) -> EncodedBatch:
        """Tokenize as ``tokenizer(text, text_pair, **kwargs)`` would, privatizing the kept sequence tokens.

        ``row_ids``: one example id per example (checked here), or `None` without a seed.
        """
        call = self._call(text, text_pair, kwargs)
        ids = self._row_ids(row_ids, len(call.text))
        self._tokenize(call)
        maps, whole_ids = self._align(call)
        sample = list(call.plain["overflow_to_sample_mapping"]) if call.overflow else list(range(len(call.text)))
        rel = self._release(maps, whole_ids, sample, ids, self.stream if stream is None else stream, vectors)
        return self._assemble(call, maps, sample, rel, vectors)

    def _call(self, text: Any, text_pair: Any, kwargs: dict[str, Any]) -> _Call:
        """The call made batched, with ``split_special_tokens=True`` by default and the target arguments refused."""
        for name in _REFUSED:
            if kwargs.get(name) is not None:
                raise InvalidParameterError(
                    f"{name}: targets are not privatized by this call; privatize them in a separate call (as text)."
                )
            kwargs.pop(name, None)
        self.check()
        kwargs.setdefault("split_special_tokens", True)
        if kwargs.get("is_split_into_words", False):
            batched = isinstance(text, (list, tuple)) and len(text) > 0 and isinstance(text[0], (list, tuple))
        else:
            batched = isinstance(text, (list, tuple))
        if not batched:
            text = [text]
            text_pair = [text_pair] if text_pair is not None else None
        return_tensors = kwargs.pop("return_tensors", None)
        return _Call(list(text), None if text_pair is None else list(text_pair), kwargs, return_tensors, batched)

    def _row_ids(self, row_ids: Sequence[Any] | None, n: int) -> list[int]:
        if row_ids is None:
            if self.seed is not None:
                raise InvalidParameterError(
                    "indices: a seeded PrivateTokenizer keys its noise by example id; pass indices= (one int per "
                    "example, e.g. the dataset index from Dataset.map(..., with_indices=True))."
                )
            return [0] * n  # unused: unseeded rows draw fresh OS entropy
        ids = check_row_ids(row_ids, "indices")
        if len(ids) != n:
            raise InvalidParameterError(f"indices has {len(ids)} entries but the batch has {n} examples.")
        return ids

    def _tokenize(self, call: _Call) -> None:
        """The plain encoding, exactly as asked; a text that is no str is named by its place."""
        tok = self.tokenizer
        try:
            call.plain = tok(call.text, call.text_pair, **call.kwargs)
        except TypeError:
            if call.kwargs.get("is_split_into_words", False):
                raise
            fault = text_fault(call.text, "text[{}]") or (
                text_fault(call.text_pair, "text_pair[{}]") if call.text_pair else None
            )
            if fault is None:
                raise
            raise fault from None
        call.encodings = list(call.plain.encodings or [])
        if len(call.encodings) != len(call.plain["input_ids"]):
            raise TokenizerNotSupportedError(
                f"tokenizer: {type(tok).__name__} returned no per-row encodings; hf-textdp needs a fast tokenizer."
            )

    def _align(self, call: _Call) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[np.ndarray]]:
        """Per output row, (its sequence positions, their positions in the example's whole encoding), and per
        example its whole encoding's ids (without padding)."""
        tok, encs, kw = self.tokenizer, call.encodings, call.kwargs
        whole_kwargs = {k: v for k, v in kw.items() if k not in _SHAPING}
        if call.overflow:  # windows: locate each in its example's whole encoding
            sample = list(call.plain["overflow_to_sample_mapping"])
            whole = tok(call.text, call.text_pair, **whole_kwargs)
            whole_ids = [np.asarray(e.ids, dtype=np.int64) for e in whole.encodings]
            return [align(whole.encodings[sample[j]], e, j) for j, e in enumerate(encs)], whole_ids
        truncates = kw.get("truncation") not in _NO_TRUNCATION or (
            kw.get("truncation") is None and kw.get("max_length") is not None
        )
        # only rows that truncation cut (their encoding keeps the rest in `overflowing`) need the whole
        # encoding; any other row is its whole encoding without the padding
        cut = [j for j, e in enumerate(encs) if e.overflowing] if truncates else []
        whole_of: dict[int, Any] = {}
        if cut:
            pairs = [call.text_pair[j] for j in cut] if call.text_pair is not None else None
            whole = tok([call.text[j] for j in cut], pairs, **whole_kwargs)
            whole_of = dict(zip(cut, whole.encodings, strict=True))
        maps, whole_ids = [], []
        for j, e in enumerate(encs):
            if j in whole_of:
                maps.append(align(whole_of[j], e, j))
                whole_ids.append(np.asarray(whole_of[j].ids, dtype=np.int64))
            else:
                keep = np.flatnonzero(np.asarray(e.attention_mask, dtype=np.int8))
                maps.append((keep, np.arange(keep.size, dtype=np.int64)))
                whole_ids.append(np.asarray(e.ids, dtype=np.int64)[keep])
        return maps, whole_ids

    def _release(
        self,
        maps: list[tuple[np.ndarray, np.ndarray]],
        whole_ids: list[np.ndarray],
        sample: list[int],
        row_ids: list[int],
        stream: int,
        vectors: bool,
    ) -> _Released:
        """Release every example's candidate positions kept in some output row, on the example's keyed stream."""
        space = self.engine.space
        n = len(whole_ids)
        # per example: whole-encoding positions kept in some output row, in position order
        kept: list[np.ndarray] = [np.zeros(0, dtype=np.int64) for _ in range(n)]
        for j, (_, a_pos) in enumerate(maps):
            kept[sample[j]] = np.union1d(kept[sample[j]], a_pos) if kept[sample[j]].size else a_pos
        priv_pos: list[np.ndarray] = []  # whole-encoding positions privatized, per example
        cand_pos: list[torch.Tensor] = []  # their positions in C
        for i in range(n):
            cls, cpos = space.classify(whole_ids[i][kept[i]])
            sel = cls == CANDIDATE
            priv_pos.append(kept[i][sel])
            cand_pos.append(torch.from_numpy(cpos[sel]))
        released = self.engine.release_positions(cand_pos, row_ids, stream=stream)
        cand_ids = space.candidate_ids.numpy()
        new_whole: list[np.ndarray] = []
        index_of: list[np.ndarray] = []  # whole position -> index into the example's released list, or -1
        for i in range(n):
            look = np.full(whole_ids[i].size, -1, dtype=np.int64)
            look[priv_pos[i]] = np.arange(priv_pos[i].size)
            index_of.append(look)
            ids = whole_ids[i].copy()
            if not vectors and priv_pos[i].size:
                ids[priv_pos[i]] = cand_ids[released[i].numpy()]
            new_whole.append(ids)
        return _Released(new_whole, index_of, released, [int(p.size) for p in priv_pos])

    def _assemble(
        self,
        call: _Call,
        maps: list[tuple[np.ndarray, np.ndarray]],
        sample: list[int],
        rel: _Released,
        vectors: bool,
    ) -> EncodedBatch:
        """Place the released ids (or gather the vectors) into each output row and count its tokens."""
        space: EmbeddingSpace = self.engine.space
        input_ids, encs = call.plain["input_ids"], call.encodings
        data = {k: call.plain[k] for k in call.plain.keys()}
        out_ids: list[list[int]] = []
        row_released: list[np.ndarray] = []
        row_vectors: list[torch.Tensor] = []
        dp_tokens: list[int] = []
        counts = [[0, 0, 0] for _ in range(len(call.text))]
        for j, (b_pos, a_pos) in enumerate(maps):
            i = sample[j]
            ids = np.asarray(input_ids[j], dtype=np.int64)
            idx = rel.index_of[i][a_pos]
            hit = idx >= 0
            if not vectors:
                ids[b_pos] = rel.new_whole[i][a_pos]
            else:
                sel = torch.from_numpy(idx[hit])
                row_vectors.append(rel.released[i].index_select(0, sel) if sel.numel() else torch.zeros(0))
            row_released.append(b_pos[hit])
            out_ids.append(ids.tolist())
            n_priv = int(hit.sum())
            dp_tokens.append(n_priv)
            attn = np.asarray(encs[j].attention_mask, dtype=bool)
            cls, _ = space.classify(ids)
            special = int(((cls == STRUCTURAL) & attn).sum())
            counts[i][0] += special
            counts[i][1] += int((~attn).sum())
            counts[i][2] += int(attn.sum()) - special - n_priv
        if not vectors:
            data["input_ids"] = out_ids
        return EncodedBatch(
            data=data,
            encodings=encs,
            batched=call.batched or call.overflow or call.return_tensors is not None,
            sample=sample,
            released=row_released,
            vectors=row_vectors if vectors else None,
            dp_tokens=dp_tokens,
            example_dp_tokens=rel.example_dp_tokens,
            example_counts=[(c[0], c[1], c[2]) for c in counts],
        )


class EncoderFacade:
    """What :class:`~hf_textdp.PrivateTokenizer` and the collators show of the :class:`PrivateEncoder` they hold:
    the configuration and the tokenizer a user reads; everything else is the encoder's own."""

    _encoder: PrivateEncoder

    @property
    def config(self) -> PrivatizerConfig:
        """The privatizer configuration (mechanism, ε, model, post-processing)."""
        return self._encoder.config

    @property
    def tokenizer(self) -> Any:
        """The wrapped Hugging Face tokenizer (the model's, or the one given)."""
        return self._encoder.tokenizer


def align(whole: Any, row: Any, j: int) -> tuple[np.ndarray, np.ndarray]:
    """(positions in ``row`` holding sequence tokens, the positions in ``whole`` they came from).

    Truncation and overflow windows keep a contiguous run of each sequence's tokens; the run's
    start is the one at which token ids, offsets and word ids all agree.
    """
    seq_w = np.asarray([-1 if s is None else s for s in whole.sequence_ids], dtype=np.int64)
    seq_r = np.asarray([-1 if s is None else s for s in row.sequence_ids], dtype=np.int64)
    ids_w, ids_r = np.asarray(whole.ids, dtype=np.int64), np.asarray(row.ids, dtype=np.int64)
    off_w, off_r = np.asarray(whole.offsets, dtype=np.int64), np.asarray(row.offsets, dtype=np.int64)
    wid_w = np.asarray([-1 if w is None else w for w in whole.word_ids], dtype=np.int64)
    wid_r = np.asarray([-1 if w is None else w for w in row.word_ids], dtype=np.int64)
    b_all: list[np.ndarray] = []
    a_all: list[np.ndarray] = []
    for s in np.unique(seq_r[seq_r >= 0]):
        b = np.flatnonzero(seq_r == s)
        a = np.flatnonzero(seq_w == s)
        nb, na = b.size, a.size
        found = -1
        if nb <= na:
            first = [0, na - nb] + [o for o in range(1, na - nb) if ids_w[a[o]] == ids_r[b[0]]]
            for o in dict.fromkeys(first):
                sl = a[o : o + nb]
                if (
                    np.array_equal(ids_w[sl], ids_r[b])
                    and np.array_equal(off_w[sl], off_r[b])
                    and np.array_equal(wid_w[sl], wid_r[b])
                ):
                    found = o
                    break
        if found < 0:
            raise TokenizerNotSupportedError(
                f"output row {j}: the tokenizer's truncated encoding of sequence {int(s)} is not a contiguous part of "
                "its whole encoding, so privatized ids cannot be placed; call without truncation."
            )
        b_all.append(b)
        a_all.append(a[found : found + nb])
    if not b_all:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(b_all), np.concatenate(a_all)


def load_tokenizer(model_id_or_path: str) -> Any:
    """A fast tokenizer from a folder or a hub id, resolved offline as ``model=`` is (space.md §3)."""
    path = Path(model_id_or_path).expanduser()
    folder = path if path.is_dir() else resolve_model(model_id_or_path)[1]
    if folder.is_file():
        raise TokenizerNotSupportedError(
            f"model_id_or_path={model_id_or_path!r} is a file; a tokenizer needs a model folder or hub id."
        )
    tok = AutoTokenizer.from_pretrained(folder)
    if not getattr(tok, "is_fast", False):
        raise TokenizerNotSupportedError(
            f"tokenizer: {model_id_or_path!r} has no fast (Rust-backed) tokenizer; hf-textdp needs one."
        )
    return tok
