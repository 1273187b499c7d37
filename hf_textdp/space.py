"""The embedding space: E over the candidate set C, its token classes and exact search (space.md §3–§5).

A pure data structure: ``hf_textdp.io.models.load_space`` builds one from ``model=``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .candidates import CLASS_NAMES
from .errors import InvalidParameterError
from .memo import Store, fp32_bytes
from .search import ExactIndex
from .utils.logging import get_logger


__all__ = ["EmbeddingSpace", "ClassPart", "parse_device", "DEFAULT_MODEL", "STRUCTURAL", "PASSTHROUGH", "CANDIDATE"]

logger = get_logger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

# position classes (space.md §4)
STRUCTURAL, PASSTHROUGH, CANDIDATE = 0, 1, 2


class _LazyTokenizer:
    """:attr:`EmbeddingSpace.tokenizer`: the tokenizer given, else loaded with ``AutoTokenizer`` from
    ``tokenizer_folder`` on first use. A warm start leaves it out (:mod:`hf_textdp.io.tokenizer_facts`):
    privatization needs only ``backend_json``, and reading the tokenizer imports ``transformers``."""

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:  # the dataclass field's default
            return None
        tok = obj.__dict__.get("_tokenizer")
        folder = obj.__dict__.get("tokenizer_folder")
        if tok is None and folder is not None:
            from transformers import AutoTokenizer  # only where the tokenizer object itself is used

            tok = obj.__dict__["_tokenizer"] = AutoTokenizer.from_pretrained(folder)
        return tok

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__["_tokenizer"] = value

    @staticmethod
    def given(obj: Any) -> Any:
        """The tokenizer ``obj`` holds now, without loading one."""
        return obj.__dict__.get("_tokenizer")


@dataclass
class EmbeddingSpace:
    """E over the candidate set, with the tokenizer (or word list) that produces its ids.

    Attributes:
        model_id (`str`): hub id, package name, or the vector file's base name.
        kind (`str`): ``"hf"``, ``"glove"`` or ``"word2vec"``.
        candidate_ids (`torch.Tensor`): strictly increasing int64 ids of C.
        E (`torch.Tensor`): ``[V, d]`` fp32 rows of the candidates, on ``device``.
        n_rows (`int`): rows of the full matrix (ids ≥ n_rows have no row).
        structural_ids / unk_id: ids that pass through uncounted / counted.
        remap_ids / remap_pos: input ids outside C and the position in C each is privatized as (its
            nearest candidate, space.md §6.5); ``None`` when every input is a candidate.
        candidates (`dict`): the candidate setting and what it excluded (the report's ``candidate_set``).
        token_class (`np.ndarray`, *optional*): each candidate's piece class (0 word-initial, 1 continuation,
            space.md §7) when replacement preserves classes; ``None``: one space over all of C.
        piece_marker (`str`, *optional*): the tokenizer's piece marker (``##``, ``Ġ``, ``▁``) behind the classes.
        store (`Store`): where mechanisms keep derived public constants (``None``: this process only;
            the loaders of ``hf_textdp.io.models`` pass the disk cache).
    """

    model_id: str
    kind: str
    candidate_ids: torch.Tensor
    E: torch.Tensor
    n_rows: int
    vocab_size: int
    structural_ids: frozenset[int]
    unk_id: int | None
    device: torch.device
    tokenizer: _LazyTokenizer = _LazyTokenizer()  # PreTrainedTokenizerBase for kind == "hf", loaded on first use
    backend_json: str | None = field(default=None, repr=False)  # the fast tokenizer's backend (kind == "hf")
    tokenizer_folder: str | None = field(default=None, repr=False)  # where ``tokenizer`` is loaded from
    words: list[str] | None = None  # static vectors
    revision: str | None = None
    file_sha256: str | None = None
    excluded_special: int = 0
    excluded_padding: int = 0
    excluded_out_of_range: int = 0
    pad_id: int | None = None
    # inputs outside C (space.md §6.5): these ids are still privatized, as the candidate at ``remap_pos``
    remap_ids: np.ndarray | None = field(default=None, repr=False)
    remap_pos: np.ndarray | None = field(default=None, repr=False)
    candidates: dict[str, Any] = field(default_factory=lambda: {"setting": "all"})
    token_class: np.ndarray | None = field(default=None, repr=False)
    piece_marker: str | None = None
    store: Store | None = field(default=None, repr=False, compare=False)
    E_full: torch.Tensor | None = field(default=None, repr=False)  # all rows (HF), for structural embeddings
    _index: ExactIndex | None = field(default=None, repr=False)
    _hash: str | None = field(default=None, repr=False)
    _word_to_id: dict[str, int] | None = field(default=None, repr=False)
    _id_class: np.ndarray | None = field(default=None, repr=False)
    _id_pos: np.ndarray | None = field(default=None, repr=False)
    _parts: list[ClassPart] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.candidate_ids.numel() < 2:
            raise InvalidParameterError(
                f"model: {self.model_id} leaves {self.candidate_ids.numel()} candidate token(s); "
                "at least 2 are needed."
            )
        size = max(self.vocab_size, self.n_rows, int(self.candidate_ids.max()) + 1)
        cls = np.full(size, PASSTHROUGH, dtype=np.int8)  # ids without a row or unknown: passthrough
        for i in self.structural_ids:
            if 0 <= i < size:
                cls[i] = STRUCTURAL
        cand = self.candidate_ids.numpy()
        cls[cand] = CANDIDATE
        if self.unk_id is not None and 0 <= self.unk_id < size:
            cls[self.unk_id] = PASSTHROUGH
        pos = np.full(size, -1, dtype=np.int64)
        pos[cand] = np.arange(cand.size)
        if self.remap_ids is not None and self.remap_pos is not None and self.remap_ids.size:
            cls[self.remap_ids] = CANDIDATE
            pos[self.remap_ids] = self.remap_pos
        self._id_class, self._id_pos = cls, pos

    # ---------------------------------------------------------------- basic facts
    @property
    def V(self) -> int:
        return int(self.candidate_ids.numel())

    @property
    def d(self) -> int:
        return int(self.E.shape[1])

    @property
    def index(self) -> ExactIndex:
        """The exact search index over E (built on first use)."""
        if self._index is None:
            self._index = ExactIndex(self.E, self.device)
        return self._index

    @property
    def space_hash(self) -> str:
        """Hex SHA-256 of V, d, candidate ids and E (space.md §3); keys every cache."""
        if self._hash is None:
            h = hashlib.sha256(b"hf_textdp/space/v1\x00")
            h.update(self.V.to_bytes(8, "little"))
            h.update(self.d.to_bytes(8, "little"))
            h.update(self.candidate_ids.numpy().astype("<i8").tobytes())
            h.update(fp32_bytes(self.E))
            self._hash = h.hexdigest()
        return self._hash

    @property
    def matrix_sha256(self) -> str:
        """SHA-256 of E as little-endian fp32, C order (the report's ``candidate_set.sha256``)."""
        return hashlib.sha256(fp32_bytes(self.E)).hexdigest()

    @property
    def ids_sha256(self) -> str:
        return hashlib.sha256(self.candidate_ids.numpy().astype("<i8").tobytes()).hexdigest()

    # ---------------------------------------------------------------- token classes
    def classify(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (class per id: 0 structural, 1 passthrough, 2 candidate; position in C or -1).

        An input outside C (space.md §6.5) is class 2 with the position of the candidate it is privatized as.
        """
        assert self._id_class is not None and self._id_pos is not None
        ids = np.asarray(ids, dtype=np.int64)
        out_cls = np.full(ids.shape, PASSTHROUGH, dtype=np.int8)
        out_pos = np.full(ids.shape, -1, dtype=np.int64)
        ok = (ids >= 0) & (ids < self._id_class.size)
        out_cls[ok] = self._id_class[ids[ok]]
        out_pos[ok] = self._id_pos[ids[ok]]
        return out_cls, out_pos

    def is_member(self, ids: np.ndarray) -> np.ndarray:
        """Whether each id is itself in C (not an input mapped to a candidate, space.md §6.5)."""
        ids = np.asarray(ids, dtype=np.int64)
        cls, pos = self.classify(ids)
        ok = pos >= 0
        out = np.zeros(ids.shape, dtype=bool)
        out[ok] = self.candidate_ids.numpy()[pos[ok]] == ids[ok]
        member: np.ndarray = out & (cls == CANDIDATE)
        return member

    # ---------------------------------------------------------------- piece classes (space.md §7)
    def class_parts(self) -> list[ClassPart]:
        """One :class:`ClassPart` per piece class: its own space over that class's candidates.

        Without class-preserving replacement (``token_class is None``) there is one part, this space itself.
        """
        if self._parts is not None:
            return self._parts
        if self.token_class is None:
            self._parts = [self.whole_part()]
            return self._parts
        parts = []
        for c in np.unique(self.token_class).tolist():
            pos = np.flatnonzero(self.token_class == c).astype(np.int64)
            name = CLASS_NAMES[c]
            if pos.size < 2:
                raise InvalidParameterError(
                    f"candidates: the {name} class of {self.model_id} has {pos.size} candidate token(s); at least 2 "
                    "are needed per class. Use a larger candidate set or classes='mix'."
                )
            idx = torch.from_numpy(pos)
            sub = EmbeddingSpace(
                model_id=self.model_id,
                kind=self.kind,
                candidate_ids=self.candidate_ids[idx],
                E=self.E[idx.to(self.E.device)].contiguous(),
                n_rows=self.n_rows,
                vocab_size=self.vocab_size,
                structural_ids=self.structural_ids,
                unk_id=self.unk_id,
                device=self.device,
                tokenizer=_LazyTokenizer.given(self),
                backend_json=self.backend_json,
                tokenizer_folder=self.tokenizer_folder,
                words=self.words,
                revision=self.revision,
                file_sha256=self.file_sha256,
                pad_id=self.pad_id,
                candidates={**self.candidates, "class": name},
                store=self.store,
                E_full=self.E_full,
            )
            parts.append(ClassPart(name, int(c), pos, sub))
        self._parts = parts
        return parts

    def whole_part(self) -> ClassPart:
        """All of C as one part (``"all"``): the space itself, whatever its classes."""
        return ClassPart("all", 0, np.arange(self.V, dtype=np.int64), self)

    def position_class(self) -> np.ndarray:
        """The class index of every candidate position (all 0 without class-preserving replacement)."""
        if self.token_class is None:
            return np.zeros(self.V, dtype=np.int8)
        return self.token_class

    def local_positions(self) -> np.ndarray:
        """Each candidate position's index in its class's space (``class_parts()[c].space``)."""
        local = np.empty(self.V, dtype=np.int64)
        for part in self.class_parts():
            local[part.positions] = np.arange(part.positions.size)
        return local

    def word_to_id(self) -> dict[str, int]:
        if self._word_to_id is None:
            assert self.words is not None
            self._word_to_id = {w: i for i, w in enumerate(self.words)}
        return self._word_to_id

    def nearest(self, Q: torch.Tensor) -> torch.Tensor:
        """Candidate ids (not positions) of the exact nearest rows to Q (postprocess.md §2)."""
        pos = self.index.search(Q, 1)[:, 0]
        return self.candidate_ids[pos]

    def model_info(self) -> dict[str, Any]:
        return {
            "id": self.model_id,
            "revision": self.revision,
            "kind": self.kind,
            "d": self.d,
            "file_sha256": self.file_sha256,
        }

    def candidate_set_info(self) -> dict[str, Any]:
        return {
            "size": self.V,
            "sha256": self.matrix_sha256,
            "ids_sha256": self.ids_sha256,
            "dtype": "float32",
            "shape": [self.V, self.d],
            "excluded_special": self.excluded_special,
            "excluded_padding": self.excluded_padding,
            "excluded_out_of_range": self.excluded_out_of_range,
            **self.candidates,
        }


@dataclass
class ClassPart:
    """One piece class of a space (space.md §7): its name, index, the positions in C it holds, and its own space.

    ``space`` is a metric space of its own: mechanisms are set up on it, so ρ₁, the diameter and every
    calibrated constant are the class's, and a released position ``p`` of ``space`` is ``positions[p]`` in C.
    """

    name: str
    index: int
    positions: np.ndarray
    space: EmbeddingSpace


def parse_device(device: str) -> torch.device:
    if not isinstance(device, str) or not (device == "cpu" or device == "cuda" or device.startswith("cuda:")):
        raise InvalidParameterError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}.")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InvalidParameterError(f"device={device!r} was asked for but CUDA is not available; use device='cpu'.")
    return torch.device(device)
