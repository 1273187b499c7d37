"""``PrivateTokenizer``: any fast Hugging Face tokenizer, with privatized ``input_ids``.

>>> from hf_textdp import PrivateTokenizer, PrivatizerConfig                      # doctest: +SKIP
>>> cfg = PrivatizerConfig(epsilon=10.0, model="bert-base-uncased")              # doctest: +SKIP
>>> ptok = PrivateTokenizer.from_pretrained("bert-base-uncased", config=cfg)       # doctest: +SKIP
>>> enc = ptok(["a private review"], padding=True, truncation=True, max_length=16)   # doctest: +SKIP
>>> enc["input_ids"], enc["dp_epsilon"]                                            # doctest: +SKIP

How a call works: the wrapped tokenizer encodes the input twice, once exactly as asked (truncation,
padding, overflow, ``return_*`` flags) and once whole. Every sequence token that the first encoding
keeps is located in the whole encoding (by sequence, token id and offsets), the candidate positions
among them go through the mechanism and post-processing of a :class:`~hf_textdp.Privatizer` (one
keyed stream per example), and the privatized ids replace the sequence tokens. Specials,
padding, ``attention_mask``, ``token_type_ids``, offsets and shapes are the plain tokenizer's for
any ε, and ``dp_epsilon`` counts only the positions kept after truncation (accounting.md §2).

Text that spells a special token (``"[CLS]"``) is text: calls default to
``split_special_tokens=True``, unless the caller passes ``split_special_tokens``.
"""

from __future__ import annotations

import copy
import secrets
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from huggingface_hub import HfApi
from transformers import AutoTokenizer, BatchEncoding

from ..accounting import Totals
from ..config import PrivatizerConfig
from ..errors import InvalidParameterError, ParameterTypeError, TokenizerNotSupportedError
from ..io.models import resolve_model
from ..mechanisms.base import AdditiveMechanism
from ..privatizer import Privatizer
from ..release import ReleaseEngine
from ..rng import fresh_seed, streams_for_rows, validate_secret_seed, validate_split, validate_stream
from ..space import CANDIDATE, STRUCTURAL, EmbeddingSpace
from ..tokens import text_fault
from ..validation import is_int, row_id_fault


__all__ = ["PrivateTokenizer"]

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


def check_row_id(value: Any, name: str) -> int:
    """An example id: an int in [0, 2**63) (docs/mechanisms/randomness.md)."""
    fault = row_id_fault(value)
    if fault is not None:
        kind = InvalidParameterError if is_int(value) else ParameterTypeError
        raise kind(f"{name} must hold ints in [0, 2**63), got {fault}.")
    return int(value)


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


class PrivateEncoder:
    """The tokenizer-plus-privatizer engine behind :class:`PrivateTokenizer` and the collators."""

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
        self._priv: Privatizer | None = None
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
        self._priv = None
        self._checked = False

    # ---------------------------------------------------------------- lazy runtime
    @property
    def privatizer(self) -> Privatizer:
        if self._priv is None:
            # the seed was checked at construction (the flag is not pickled, like the Privatizer's own)
            self._priv = Privatizer(self.config, self.seed, split=self.split, stream=self.stream, allow_weak_seed=True)
        return self._priv

    @property
    def engine(self) -> ReleaseEngine:
        """The release engine this encoder releases its candidate tokens with (the privatizer's own)."""
        return self.privatizer.engine

    @property
    def space(self) -> EmbeddingSpace:
        return self.engine.space

    def _model_tokenizer(self) -> Any:
        """The tokenizer of ``config.model``'s space (refused for a static word-vector file)."""
        if self.space.kind != "hf" or self.space.tokenizer is None:
            raise TokenizerNotSupportedError(
                f"config.model={self.config.model!r} is a static word-vector file; PrivateTokenizer and the "
                "collators need a Hugging Face model (its tokenizer and embedding matrix)."
            )
        return self.space.tokenizer

    @property
    def tokenizer(self) -> Any:
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
        priv = self.engine
        mech, step, space = priv.mechanism, priv.step, priv.space
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
        row_ids: Sequence[int] | None,
        stream: int | None = None,
        vectors: bool = False,
        **kwargs: Any,
    ) -> EncodedBatch:
        """Tokenize as ``tokenizer(text, text_pair, **kwargs)`` would, privatizing the kept sequence tokens."""
        for name in _REFUSED:
            if kwargs.get(name) is not None:
                raise InvalidParameterError(
                    f"{name}: targets are not privatized by this call; privatize them in a separate call (as text)."
                )
            kwargs.pop(name, None)
        self.check()
        tok = self.tokenizer
        kwargs.setdefault("split_special_tokens", True)
        split_words = bool(kwargs.get("is_split_into_words", False))
        if split_words:
            batched = isinstance(text, (list, tuple)) and len(text) > 0 and isinstance(text[0], (list, tuple))
        else:
            batched = isinstance(text, (list, tuple))
        if not batched:
            text = [text]
            text_pair = [text_pair] if text_pair is not None else None
        n = len(text)
        if row_ids is None:
            if self.seed is not None:
                raise InvalidParameterError(
                    "indices: a seeded PrivateTokenizer keys its noise by example id; pass indices= (one int per "
                    "example, e.g. the dataset index from Dataset.map(..., with_indices=True))."
                )
            ids_list = [0] * n  # unused: unseeded rows draw fresh OS entropy
        else:
            ids_list = [check_row_id(v, "indices") for v in row_ids]
            if len(ids_list) != n:
                raise InvalidParameterError(f"indices has {len(ids_list)} entries but the batch has {n} examples.")

        call_kwargs = dict(kwargs)
        return_tensors = call_kwargs.pop("return_tensors", None)
        try:
            plain = tok(text, text_pair, **call_kwargs)
        except TypeError:
            if split_words:
                raise
            fault = text_fault(text, "text[{}]") or (text_fault(text_pair, "text_pair[{}]") if text_pair else None)
            if fault is None:
                raise
            raise fault from None
        encs = list(plain.encodings or [])
        if len(encs) != len(plain["input_ids"]):
            raise TokenizerNotSupportedError(
                f"tokenizer: {type(tok).__name__} returned no per-row encodings; hf-textdp needs a fast tokenizer."
            )
        overflow = bool(call_kwargs.get("return_overflowing_tokens", False))
        sample = list(plain["overflow_to_sample_mapping"]) if overflow else list(range(n))
        truncates = (
            overflow
            or call_kwargs.get("truncation") not in _NO_TRUNCATION
            or (call_kwargs.get("truncation") is None and call_kwargs.get("max_length") is not None)
        )
        whole_kwargs = {k: v for k, v in call_kwargs.items() if k not in _SHAPING}
        if overflow:  # windows: locate each in its example's whole encoding
            whole = tok(text, text_pair, **whole_kwargs)
            whole_ids = [np.asarray(e.ids, dtype=np.int64) for e in whole.encodings]
            maps = [_align(whole.encodings[sample[j]], e, j) for j, e in enumerate(encs)]
        else:
            # only rows that truncation cut (their encoding keeps the rest in `overflowing`) need the whole
            # encoding; any other row is its whole encoding without the padding
            cut = [j for j, e in enumerate(encs) if e.overflowing] if truncates else []
            whole_of: dict[int, Any] = {}
            if cut:
                pairs = [text_pair[j] for j in cut] if text_pair is not None else None
                whole = tok([text[j] for j in cut], pairs, **whole_kwargs)
                whole_of = dict(zip(cut, whole.encodings, strict=True))
            maps, whole_ids = [], []
            for j, e in enumerate(encs):
                if j in whole_of:
                    maps.append(_align(whole_of[j], e, j))
                    whole_ids.append(np.asarray(whole_of[j].ids, dtype=np.int64))
                else:
                    keep = np.flatnonzero(np.asarray(e.attention_mask, dtype=np.int8))
                    maps.append((keep, np.arange(keep.size, dtype=np.int64)))
                    whole_ids.append(np.asarray(e.ids, dtype=np.int64)[keep])

        space = self.space
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
        released = self.engine.release_positions(cand_pos, ids_list, stream=self.stream if stream is None else stream)

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

        input_ids = plain["input_ids"]
        data = {k: plain[k] for k in plain.keys()}
        out_ids: list[list[int]] = []
        row_released: list[np.ndarray] = []
        row_vectors: list[torch.Tensor] = []
        dp_tokens: list[int] = []
        counts = [[0, 0, 0] for _ in range(n)]
        for j, (b_pos, a_pos) in enumerate(maps):
            i = sample[j]
            ids = np.asarray(input_ids[j], dtype=np.int64)
            idx = index_of[i][a_pos]
            hit = idx >= 0
            if not vectors:
                ids[b_pos] = new_whole[i][a_pos]
            else:
                sel = torch.from_numpy(idx[hit])
                row_vectors.append(released[i].index_select(0, sel) if sel.numel() else torch.zeros(0))
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
            batched=batched or overflow or return_tensors is not None,
            sample=sample,
            released=row_released,
            vectors=row_vectors if vectors else None,
            dp_tokens=dp_tokens,
            example_dp_tokens=[int(p.size) for p in priv_pos],
            example_counts=[(c[0], c[1], c[2]) for c in counts],
        )


def _align(whole: Any, row: Any, j: int) -> tuple[np.ndarray, np.ndarray]:
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


class PrivateTokenizer:
    """A Hugging Face tokenizer whose ``input_ids`` are privatized token by token.

    Calling it takes the wrapped tokenizer's arguments (``text``, ``text_pair``, ``padding``,
    ``truncation``, ``max_length``, ``stride``, ``return_overflowing_tokens``, ``return_tensors``,
    ``is_split_into_words``, ...) and returns the ``BatchEncoding`` the plain tokenizer would, with
    the sequence tokens privatized and three more keys per row: ``dp_tokens``, ``dp_epsilon`` (and
    ``dp_delta`` for mechanisms with δ), counting only the positions kept after truncation. Pop them
    before ``model(**enc)``.

    Args:
        tokenizer (`PreTrainedTokenizerFast`, `str` or `None`): the tokenizer to wrap, a folder or hub id
            to load it from, or `None` for the tokenizer of ``config.model``. Its vocabulary must be
            that of ``config.model`` (the embedding space the mechanism uses).
        config (`PrivatizerConfig`): mechanism, ε, model, post-processing (``postprocess="vector"``
            releases vectors, not ids: use :class:`~hf_textdp.DataCollatorForInputsEmbeds`).
        seed (`int`, *optional*): secret key in [0, 2**64). With a seed, example k's noise derives from
            (seed, split, stream, k) and every call needs ``indices=``; never saved. Without a seed
            every example draws fresh OS entropy (each call is a new release).
        split (`str`, defaults to `""`): split name, part of the noise key.
        stream (`int`, defaults to `0`): noise stream (collators use epoch + 1).
        allow_weak_seed (`bool`, defaults to `False`): accept a seed below 2**32 (it can be searched), for
            public benchmark data only.

    Example:

    >>> cfg = PrivatizerConfig(epsilon=50.0, model="bert-base-uncased")          # doctest: +SKIP
    >>> ptok = PrivateTokenizer(None, cfg, seed=secrets.randbits(64))               # doctest: +SKIP
    >>> enc = ptok(["good movie", "bad plot"], indices=[0, 1], padding=True, return_tensors="pt")  # doctest: +SKIP
    >>> enc["input_ids"].shape, enc["dp_epsilon"]                                      # doctest: +SKIP
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
        self._encoder = PrivateEncoder(
            tokenizer, config, seed, split=split, stream=stream, allow_weak_seed=allow_weak_seed
        )
        if config.postprocess == "vector":
            raise InvalidParameterError(
                "postprocess='vector' releases vectors, not token ids; use DataCollatorForInputsEmbeds "
                "(inputs_embeds) or a postprocess that outputs tokens (e.g. 'nearest')."
            )
        self.totals = Totals()

    # ---------------------------------------------------------------- construction and saving
    @classmethod
    def from_pretrained(
        cls,
        model_id_or_path: str | Path,
        config: PrivatizerConfig | None = None,
        seed: int | None = None,
        **kwargs: Any,
    ) -> PrivateTokenizer:
        """Load the tokenizer of a folder or hub id (offline, as ``model=``), with ``config`` or its saved one.

        Args:
            model_id_or_path (`str`): a folder written by :meth:`save_pretrained`, a model folder or a hub id.
            config (`PrivatizerConfig`, *optional*): defaults to the ``privatizer_config.json`` found there.
            seed (`int`, *optional*): the secret key (never saved).
            kwargs: ``split``, ``stream``, ``allow_weak_seed``.
        """
        source = str(model_id_or_path)
        if config is None:
            config = PrivatizerConfig.from_pretrained(source)
        obj = cls(source, config, seed, **kwargs)
        _ = obj._encoder.tokenizer  # fail now, not at the first call, when the tokenizer cannot load
        return obj

    def save_pretrained(self, save_directory: str | Path, **kwargs: Any) -> list[str]:
        """Write the tokenizer files and ``privatizer_config.json`` (never the seed); returns the files."""
        folder = Path(save_directory)
        folder.mkdir(parents=True, exist_ok=True)
        files = [str(f) for f in self.tokenizer.save_pretrained(str(folder), **kwargs)]
        files.append(str(self.config.save_pretrained(folder)))
        return files

    def push_to_hub(
        self,
        repo_id: str,
        *,
        commit_message: str = "Upload PrivateTokenizer",
        private: bool | None = None,
        token: str | None = None,
        revision: str | None = None,
    ) -> Any:
        """Publish the tokenizer and its ``privatizer_config.json`` to a hub repo (``huggingface_hub``)."""
        api = HfApi(token=token)
        api.create_repo(repo_id, private=private, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            self.save_pretrained(tmp)
            return api.upload_folder(
                repo_id=repo_id, folder_path=tmp, commit_message=commit_message, revision=revision
            )

    # ---------------------------------------------------------------- the wrapped tokenizer
    @property
    def config(self) -> PrivatizerConfig:
        return self._encoder.config

    @property
    def seed(self) -> int | None:
        return self._encoder.seed

    @property
    def tokenizer(self) -> Any:
        """The wrapped Hugging Face tokenizer."""
        return self._encoder.tokenizer

    @property
    def privatizer(self) -> Privatizer:
        return self._encoder.privatizer

    def decode(self, token_ids: Any, **kwargs: Any) -> str:
        result: str = self.tokenizer.decode(token_ids, **kwargs)
        return result

    def batch_decode(self, sequences: Any, **kwargs: Any) -> list[str]:
        result: list[str] = self.tokenizer.batch_decode(sequences, **kwargs)
        return result

    def __len__(self) -> int:
        return len(self.tokenizer)

    def __getattr__(self, name: str) -> Any:
        # everything else (pad_token_id, convert_ids_to_tokens, pad, ...) is the wrapped tokenizer's
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.tokenizer, name)

    def __getstate__(self) -> dict[str, Any]:
        return {"encoder": self._encoder}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._encoder = state["encoder"]
        self.totals = Totals()

    def __repr__(self) -> str:  # never shows the seed
        seeded = "seeded" if self.seed is not None else "unseeded"
        return (
            f"PrivateTokenizer(mechanism={self.config.mechanism!r}, epsilon={self.config.epsilon!r}, "
            f"model={self.config.model!r}, {seeded})"
        )

    # ---------------------------------------------------------------- calling
    def __call__(
        self,
        text: Any,
        text_pair: Any = None,
        *,
        indices: int | Sequence[int] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Tokenize like the wrapped tokenizer, privatizing the sequence tokens that are kept.

        Args:
            text: as for the wrapped tokenizer (a str, a list of str, or words with
                ``is_split_into_words=True``).
            text_pair: the second sequence of a pair, as for the wrapped tokenizer.
            indices (`int` or `list[int]`, *optional*): example ids keying the noise (required with a
                seed): the dataset index or an id column, one per example.
            kwargs: the wrapped tokenizer's arguments.

        Returns:
            `BatchEncoding`: the plain tokenizer's keys with privatized ``input_ids``, plus
            ``dp_tokens``, ``dp_epsilon`` (and ``dp_delta``) per output row; an overflow window counts its own
            tokens, while an example's loss is that of its windows' union (:meth:`privacy_report`).
        """
        row_ids: list[Any] | None
        if indices is None:
            row_ids = None
        elif isinstance(indices, (int, np.integer)):  # one example (a bool is refused by check_row_id)
            row_ids = [indices]
        elif isinstance(indices, torch.Tensor):
            row_ids = indices.tolist()
        else:
            row_ids = list(indices)
        return_tensors = kwargs.get("return_tensors")
        enc = self._encoder.encode(text, text_pair, row_ids=row_ids, **kwargs)
        claim = self._encoder.engine.claim
        data = enc.data
        data["dp_tokens"] = enc.dp_tokens
        eps = [claim.row_epsilon(k) for k in enc.dp_tokens]
        data["dp_epsilon"] = [float("nan") if e is None else e for e in eps] if return_tensors else eps
        if claim.delta_token > 0:
            data["dp_delta"] = [claim.row_delta(k) for k in enc.dp_tokens]
        for k, (special, padding, passthrough) in zip(enc.example_dp_tokens, enc.example_counts, strict=True):
            self.totals.add_row(
                dp_tokens=k,
                special=special,
                padding=padding,
                passthrough=passthrough,
                epsilon=claim.row_epsilon(k),
                delta=claim.row_delta(k),
            )
        if not enc.batched:
            data = {k: v[0] for k, v in data.items()}
        return BatchEncoding(data, encoding=enc.encodings, tensor_type=return_tensors)

    def privacy_report(self) -> dict[str, Any]:
        """The privacy report of accounting.md for what this object released in this process."""
        return self._encoder.engine.build_report(self.totals)
