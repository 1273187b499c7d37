"""What building a Hugging Face model's space reads from its tokenizer and config, kept in the disk cache.

Reading them with ``AutoTokenizer`` and ``AutoConfig`` imports ``transformers`` (about 0.7 s of the 4 s a 1-row
``hf-textdp privatize`` took on 2 cores). They are public facts of the model's files: the fast tokenizer's
backend (its serialization, which tokenizes and decodes), its size, special, pad and unknown ids, every id's
token string, and where the input-embedding matrix is stored. They are kept under a key made of the folder's
identity (:func:`~hf_textdp.io.files.stat_identity`: its files' sizes and modification times) and the
``transformers`` and ``tokenizers`` versions, so a warm start reads one JSON file and imports neither
``transformers`` nor its model code; an edited folder or another library version reads the model again.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from ..memo import Store
from .files import stat_identity


__all__ = ["TokenizerFacts", "cached_facts", "facts_of", "save_facts"]

#: bump when the facts or their meaning change, so that older cache entries are not read
FACTS_VERSION = "tokenizer-facts-v1"
_KIND = "tokenizer"


@dataclass(frozen=True)
class TokenizerFacts:
    """A model folder's tokenizer and embedding facts (all public).

    Attributes:
        backend (`str`): ``tokenizer.backend_tokenizer.to_str()``.
        size (`int`): ``len(tokenizer)`` (added tokens included).
        special (`list[int]`): the special ids (``all_special_ids`` and added tokens marked special).
        pads (`list[int]`): the tokenizer's and the config's pad ids.
        unk_id / pad_id (`int`, *optional*): ``unk_token_id`` and ``pad_token_id``.
        tokens (`list[str]`): ``convert_ids_to_tokens(range(size))``.
        embedding (`list[str]`, *optional*): the safetensors file (relative to the folder) and tensor name of the
            input embedding; ``None`` where it was read by loading the whole model.
    """

    backend: str
    size: int
    special: list[int]
    pads: list[int]
    unk_id: int | None
    pad_id: int | None
    tokens: list[str]
    embedding: list[str] | None


def _key(folder: Path) -> str:
    versions = [f"{name} {metadata.version(name)}" for name in ("transformers", "tokenizers")]
    text = "|".join([FACTS_VERSION, stat_identity(folder), *versions])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def facts_of(tokenizer: Any, config: Any, embedding: list[str] | None) -> TokenizerFacts:
    """The facts of a loaded tokenizer and config (``embedding``: where the matrix was read, or ``None``)."""
    from ..tokens import backend_json  # refuses a slow tokenizer, as privatization does

    special = {int(i) for i in tokenizer.all_special_ids}
    for i, tok in getattr(tokenizer, "added_tokens_decoder", {}).items():
        if getattr(tok, "special", False):
            special.add(int(i))
    pads = {int(x) for x in (tokenizer.pad_token_id, getattr(config, "pad_token_id", None)) if x is not None}
    size = len(tokenizer)
    return TokenizerFacts(
        backend=backend_json(tokenizer),
        size=size,
        special=sorted(special),
        pads=sorted(pads),
        unk_id=None if tokenizer.unk_token_id is None else int(tokenizer.unk_token_id),
        pad_id=None if tokenizer.pad_token_id is None else int(tokenizer.pad_token_id),
        tokens=[str(t) for t in tokenizer.convert_ids_to_tokens(list(range(size)))],
        embedding=embedding,
    )


def cached_facts(folder: Path, store: Store) -> TokenizerFacts | None:
    """The facts kept for ``folder`` as it is now, or ``None`` (none kept, or an entry that does not read)."""
    hit = store.load(_KIND, _key(folder))
    if hit is None:
        return None
    try:
        facts = TokenizerFacts(**hit)
    except TypeError:  # another layout: read the model again
        return None
    ok = isinstance(facts.backend, str) and isinstance(facts.tokens, list) and len(facts.tokens) == facts.size
    return facts if ok else None


def save_facts(folder: Path, store: Store, facts: TokenizerFacts) -> None:
    """Keep ``facts`` for ``folder`` (a failed write only costs the next start its speed)."""
    store.save(_KIND, _key(folder), asdict(facts))
