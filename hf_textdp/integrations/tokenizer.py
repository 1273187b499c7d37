"""``PrivateTokenizer``: any fast Hugging Face tokenizer, with privatized ``input_ids``.

>>> from hf_textdp import PrivateTokenizer, PrivatizerConfig                      # doctest: +SKIP
>>> cfg = PrivatizerConfig(epsilon=10.0, model="bert-base-uncased")              # doctest: +SKIP
>>> ptok = PrivateTokenizer.from_pretrained("bert-base-uncased", config=cfg)       # doctest: +SKIP
>>> enc = ptok(["a private review"], padding=True, truncation=True, max_length=16)   # doctest: +SKIP
>>> enc["input_ids"], enc["dp_epsilon"]                                            # doctest: +SKIP

A call tokenizes and releases through :class:`~hf_textdp.integrations.encoder.PrivateEncoder` (the
wrapped tokenizer and the release engine): the privatized ids replace the sequence tokens. Specials,
padding, ``attention_mask``, ``token_type_ids``, offsets and shapes are the plain tokenizer's for
any ε, and ``dp_epsilon`` counts only the positions kept after truncation (accounting.md §2).

Text that spells a special token (``"[CLS]"``) is text: calls default to
``split_special_tokens=True``, unless the caller passes ``split_special_tokens``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from huggingface_hub import HfApi
from transformers import BatchEncoding

from ..accounting import Totals
from ..config import PrivatizerConfig
from ..errors import InvalidParameterError
from .encoder import EncoderFacade, PrivateEncoder


__all__ = ["PrivateTokenizer"]


class PrivateTokenizer(EncoderFacade):
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
        seeded = "seeded" if self._encoder.seed is not None else "unseeded"
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
        elif isinstance(indices, (int, np.integer)):  # one example (a bool is refused by check_row_ids)
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
