"""Load the masked LM that a contextual mechanism reads (dp_mlm.md §4): ``AutoModelForMaskedLM`` of ``config.model``.

The embedding space and the candidate set come from the same model folder as for every mechanism
(:func:`~hf_textdp.io.models.load_space`); this module adds its masked-LM head. A model without one (a
``BertModel`` checkpoint, a vector file) is refused rather than given a randomly initialised head.
"""

from __future__ import annotations

import threading
from typing import Any

from ..errors import InvalidParameterError
from ..mechanisms.mlm_logits import MaskedLMScorer
from ..space import EmbeddingSpace
from .files import stat_identity
from .models import resolve_model


__all__ = ["load_masked_lm"]

_LOCK = threading.Lock()
_CACHE: dict[tuple[str, str], Any] = {}


def _max_length(model: Any, tokenizer: Any) -> int:
    """The most ids one sequence may hold: the position table (less 2: RoBERTa's offset) and the tokenizer's limit."""
    n_pos = int(getattr(model.config, "max_position_embeddings", 512) or 512)
    limit = n_pos - 2 if n_pos > 2 else n_pos
    declared = getattr(tokenizer, "model_max_length", None)
    if isinstance(declared, int) and 0 < declared < limit:
        limit = declared
    return limit


def load_masked_lm(model: str, space: EmbeddingSpace) -> MaskedLMScorer:
    """The :class:`~hf_textdp.mechanisms.mlm_logits.MaskedLMScorer` of ``model``'s masked LM on ``space.device``.

    Raises:
        InvalidParameterError: ``model`` is a vector file, has no masked-LM head, or its tokenizer no mask token.
    """
    kind, path, _ = resolve_model(model)
    if kind == "file" or space.tokenizer is None:
        raise InvalidParameterError(
            f"model: mechanism 'dp_mlm' needs a Hugging Face masked LM (e.g. FacebookAI/roberta-base), got the vector "
            f"file {model!r}."
        )
    tok = space.tokenizer
    if tok.mask_token_id is None:
        raise InvalidParameterError(f"model: the tokenizer of {model!r} has no mask token; dp_mlm needs a masked LM.")
    key = (stat_identity(path), str(space.device))
    with _LOCK:
        cached = _CACHE.get(key)
        if cached is None:
            from transformers import AutoModelForMaskedLM  # the modelling code: only where a model is built

            try:
                mlm, info = AutoModelForMaskedLM.from_pretrained(path, output_loading_info=True)
            except (ValueError, OSError) as err:
                raise InvalidParameterError(
                    f"model: {model!r} cannot be loaded as a masked LM (AutoModelForMaskedLM): {type(err).__name__}."
                ) from None
            missing = list(info.get("missing_keys", []))
            if missing:
                raise InvalidParameterError(
                    f"model: {model!r} has no trained masked-LM head ({len(missing)} weights missing, e.g. "
                    f"{missing[0]!r}); dp_mlm needs a *ForMaskedLM checkpoint."
                )
            cached = mlm.to(space.device).eval()
            _CACHE[key] = cached
    special = frozenset(int(i) for i in tok.all_special_ids)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.mask_token_id
    return MaskedLMScorer(
        cached,
        mask_id=int(tok.mask_token_id),
        pad_id=int(pad),
        special_ids=special,
        max_length=_max_length(cached, tok),
    )
