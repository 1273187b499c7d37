"""``Privatizer``: the ``datasets.map`` transform (the release itself is :mod:`hf_textdp.release`'s).

>>> from hf_textdp import PrivatizerConfig, Privatizer          # doctest: +SKIP
>>> priv = Privatizer(PrivatizerConfig(epsilon=100.0), seed=2**40 + 17)   # doctest: +SKIP
>>> ds = ds.map(priv, batched=True, with_indices=True)           # doctest: +SKIP

A ``Privatizer`` pickles only its config, its seed (or a fresh random nonce when there is none) and
its column settings (decision D4): the embedding matrix loads lazily in each process, ``datasets``
hashes it in milliseconds, a seeded rerun is a cache hit, and an unseeded rerun draws fresh noise.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .accounting import Totals, selective_rows
from .batch import TokenBatch, read_map_batch
from .config import PrivatizerConfig
from .errors import HfTextDPError, InvalidParameterError, InvalidRowError, ParameterTypeError
from .io.files import stat_identity
from .io.models import model_identity
from .mechanisms.context import RowContext
from .release import ReleaseEngine
from .rng import STREAM_VERSION, validate_secret_seed, validate_split, validate_stream
from .sensitive import Detector, build_detectors, sensitive_mask, sensitive_spans, static_offsets
from .sensitive.render import placeholder_words
from .space import CANDIDATE, STRUCTURAL
from .tokens import HFTokens, WordLayout, WordTokens, make_tokens
from .users import UserBatch, UserRelease, UserTable, blank_dropped, fit_counts, user_secret, user_values
from .utils.gc_pause import gc_paused
from .utils.logging import get_logger


__all__ = ["Privatizer"]

logger = get_logger(__name__)


class Privatizer:
    """Rewrite text token by token with a metric-DP mechanism on the model's own embeddings.

    Args:
        config (`PrivatizerConfig`): mechanism, ε, model, post-processing.
        seed (`int`, *optional*): secret key in [0, 2**64). With a seed, row r's noise derives from
            (seed, split, stream, r), so outputs do not depend on batching or workers. Never saved.
            Use at least 64 random bits (``secrets.randbits(64)``) and never publish it; a seed below
            2**32 is refused (it can be searched) unless ``allow_weak_seed=True``.
        text_column (`str`, defaults to `"text"`): the column to privatize (replaced in place).
        id_column (`str`, *optional*): an int column used as the row id instead of the row index. Ids must be
            unique (two rows with one id share their noise): a repeated id within a batch is refused.
        split (`str`, defaults to `""`): split name, part of the noise key (two splits never share noise).
        stream (`int`, defaults to `0`): noise stream (collators use epoch + 1).
        allow_weak_seed (`bool`, defaults to `False`): accept a seed below 2**32, for public benchmark data
            only (anyone can search such a seed from the output). Not pickled: an unpickled privatizer is
            not checked again, and the ``datasets`` fingerprint does not depend on it.
        keep_spans (`bool`, defaults to `False`): keep the span column of ``sensitive["column"]`` in saved outputs
            (:attr:`drop_columns`; it gives each identifier's character positions in the original text).

    Raises:
        InvalidParameterError: a seed out of [0, 2**64), or below 2**32 without ``allow_weak_seed=True``.
    """

    def __init__(
        self,
        config: PrivatizerConfig,
        seed: int | None = None,
        text_column: str = "text",
        id_column: str | None = None,
        split: str = "",
        *,
        stream: int = 0,
        allow_weak_seed: bool = False,
        keep_spans: bool = False,
    ) -> None:
        if not isinstance(config, PrivatizerConfig):
            raise ParameterTypeError(f"config must be a PrivatizerConfig, got {type(config).__name__}.")
        self.config = config
        self.seed = validate_secret_seed(seed, allow_weak_seed=allow_weak_seed)
        if not isinstance(text_column, str) or not text_column:
            raise InvalidParameterError(f"text_column must be a non-empty str, got {text_column!r}.")
        if id_column is not None and (not isinstance(id_column, str) or not id_column):
            raise InvalidParameterError(f"id_column must be a non-empty str or None, got {id_column!r}.")
        validate_split(split)
        validate_stream(stream)
        self.text_column = text_column
        self.id_column = id_column
        self.split = split
        self.stream = stream
        self.keep_spans = bool(keep_spans)
        # A fresh nonce makes every unseeded Privatizer hash differently, so `datasets` never serves a
        # cached (already released) result for it: each unseeded map is a new release.
        self._nonce = secrets.token_hex(16) if self.seed is None else None
        # per-person work without a seed (users.md §5): row priorities and pseudonyms keyed by a secret of this
        # privatizer, pickled to its workers as a seed is
        self._user_secret = user_secret(config, self.seed)
        self._init_runtime()

    def _init_runtime(self) -> None:
        #: the release of this configuration under this privatizer's key (built lazily, never pickled)
        self.engine = ReleaseEngine(self.config, self.seed, self.split, self.stream)
        self._tokens: HFTokens | WordTokens | None = None
        spec = self.config.sensitive
        self._detectors: list[Detector] = [] if spec is None else build_detectors(spec)
        self.totals = Totals()
        #: per-person accounting and consistent pseudonyms (users.md), ``None`` without them
        self.users = UserRelease.of(self.config, self.seed, self._user_secret, self.engine)

    # ---------------------------------------------------------------- pickling (decision D4)
    def __getstate__(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "seed": self.seed,
            "nonce": self._nonce,
            "text_column": self.text_column,
            "id_column": self.id_column,
            "split": self.split,
            "stream": self.stream,
            "keep_spans": self.keep_spans,
            "inputs": self._inputs(),
            **({} if self.users is None else self.users.state(self._user_secret)),  # users.md §4
        }

    def _inputs(self) -> str:
        """The noise stream's version and the identity of the files read (model or vector file, candidate vocab,
        frequency corpus): pickled, so the ``datasets`` fingerprint changes when one of them is edited and a
        cached map over the old file is not served (decision D4). Stat only: nothing is read or loaded here."""
        try:
            model = model_identity(self.config.model)
        except HfTextDPError:  # the map reports it when it loads the model
            model = f"unresolved {self.config.model}"
        paths: list[Any] = [self.config.candidate_spec.vocab, self.config.options.get("frequency_corpus")]
        spec = self.config.sensitive  # a spaCy pipeline folder read by a detector
        pipelines = [d[len("spacy:") :] for d in (spec.named() if spec is not None else ()) if d.startswith("spacy:")]
        paths += [p for p in pipelines if os.path.isdir(p)]
        files = [stat_identity(p) for p in paths if isinstance(p, (str, os.PathLike))]
        return "\n".join([f"stream v{STREAM_VERSION}", model, *files])

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.config = PrivatizerConfig(**state["config"])
        self.seed = state["seed"]
        self._nonce = state["nonce"]
        self.text_column = state["text_column"]
        self.id_column = state["id_column"]
        self.split = state["split"]
        self.stream = state["stream"]
        self.keep_spans = state.get("keep_spans", False)
        self._user_secret = state.get("user_secret")
        self._init_runtime()
        if self.users is not None:
            self.users.restore(state)

    @property
    def drop_columns(self) -> list[str]:
        """Input columns a saved output leaves out: the span column of ``sensitive["column"]`` (it gives each
        identifier's character positions in the original text) unless ``keep_spans=True``, and the user column of
        ``user["column"]`` (an identifier: users.md §6) unless ``user["keep_column"]``."""
        spans = None if self.config.sensitive is None or self.keep_spans else self.config.sensitive.column
        users = None if self.config.user is None else self.config.user.dropped_column
        return [c for c in (spans, users) if c is not None]

    def __repr__(self) -> str:  # never shows the seed
        seeded = "seeded" if self.seed is not None else "unseeded"
        return (
            f"Privatizer(mechanism={self.config.mechanism!r}, epsilon={self.config.epsilon!r}, "
            f"model={self.config.model!r}, text_column={self.text_column!r}, {seeded})"
        )

    # ---------------------------------------------------------------- the tokens of the engine's space
    def _ensure(self) -> None:
        if self._tokens is None:
            self._tokens = make_tokens(self.engine.space, self.config.passthrough)

    # ---------------------------------------------------------------- public API
    def privatize(
        self,
        texts: Sequence[str],
        row_ids: Sequence[int] | None = None,
        *,
        spans: Sequence[Any] | None = None,
        users: Sequence[Any] | None = None,
    ) -> list[str]:
        """Privatize a list of texts; with a seed, text i uses row id ``row_ids[i]`` (default: i).

        ``spans``: with ``sensitive["column"]``, text i's sensitive character spans ``[[start, end], ...]``.
        ``users``: with ``user``, text i's user (users.md); a dropped row (``bound="rows"``) comes back as ``""``.

        Example:

        >>> priv.privatize(["a private review"])     # doctest: +SKIP
        ['a secluded review']
        """
        if isinstance(texts, str):
            raise ParameterTypeError("texts must be a list of str, got a single str (wrap it in a list).")
        ids = list(range(len(texts))) if row_ids is None else list(row_ids)
        if len(ids) != len(texts):
            raise InvalidParameterError(f"row_ids has {len(ids)} entries but texts has {len(texts)}.")
        spec = self.config.sensitive
        if spec is not None and spec.column is not None:
            if spans is None:
                raise InvalidParameterError(
                    f'spans: sensitive["column"] = {spec.column!r} needs the texts\' character spans, '
                    "privatize(texts, spans=[[[start, end], ...], ...]) (one list per text)."
                )
            if len(spans) != len(texts):
                raise InvalidParameterError(f"spans has {len(spans)} entries but texts has {len(texts)}.")
        plan = None if self.users is None else self.users.batch(None if users is None else list(users), ids)
        texts_in, span_list = blank_dropped(list(texts), None if spans is None else list(spans), plan)
        result: list[str] = self._process(texts_in, ids, span_list, plan)[self.text_column]
        return result

    def __call__(
        self, batch: dict[str, list[Any]], indices: Sequence[int] | int | None = None
    ) -> dict[str, list[Any]]:
        """Transform a ``datasets`` batch: ``ds.map(priv, batched=True, with_indices=True)``."""
        spec = self.config.sensitive
        span_column = None if spec is None else spec.column
        texts, single, row_ids, span_values = read_map_batch(
            batch, indices, self.text_column, self.id_column, self.seed is not None, span_column
        )
        plan = None  # per-person accounting (users.md): the rows' users, levels and kept rows
        if self.users is not None:
            plan = self.users.batch(user_values(batch, self.users.spec, single), row_ids)
            texts, span_values = blank_dropped(texts, span_values, plan)
        out = self._process(texts, row_ids, span_values, plan)
        if self.config.keep_original:
            out[f"{self.text_column}_original"] = list(texts)
        if single:
            return {k: v[0] for k, v in out.items()}
        return out

    def privacy_report(self) -> dict[str, Any]:
        """The privacy report of accounting.md for what this object released in this process (a map served
        from the ``datasets`` cache, or run in ``num_proc`` workers, is not counted: it warns, once, when nothing
        was)."""
        if self.totals.rows == 0 and not getattr(self, "_warned_no_rows", False):
            self._warned_no_rows = True  # not pickled (__getstate__): the fingerprint does not change
            logger.warning(
                "privacy_report: this Privatizer privatized no rows in this process (a map served from the datasets "
                "cache, or run in num_proc worker processes, is not counted here): the report's totals are empty. "
                "For the totals of a whole dataset, save it with privatize_dataset(..., output_dir=...) and read "
                "privacy_report(output_dir).",
            )
        return self.engine.build_report(self.totals, users=None if self.users is None else self.users.totals)

    def fit_users(self, source: Any, *, batch_size: int = 1000) -> UserTable:
        """The counting pass (users.md §4): every user's privatized tokens and rows in ``source`` (the whole split
        this privatizer then maps, with the same row ids), before any release; ``privatize_dataset`` calls it."""
        if self.users is None:
            raise InvalidParameterError(
                "fit_users: this config has neither user= nor sensitive['consistent']: there is nothing to count."
            )
        self.users.table = fit_counts(self, source, batch_size=batch_size)
        return self.users.table

    # ---------------------------------------------------------------- the work
    def _check_texts(self, texts: Sequence[Any], row_ids: Sequence[int]) -> None:
        for t, r in zip(texts, row_ids, strict=False):
            if not isinstance(t, str):
                raise InvalidRowError(f"row {r}: expected str in column {self.text_column!r}, got {type(t).__name__}.")

    def _process(
        self, texts: list[str], row_ids: list[int], spans: list[Any] | None, users: UserBatch | None
    ) -> dict[str, list[Any]]:
        """:meth:`_process_batch` with Python's cyclic collector paused (its walks over the batch's many small
        lists cost a quarter of the host time; nothing in a batch forms a cycle)."""
        with gc_paused():
            return self._process_batch(texts, row_ids, spans, users)

    def _sensitive(
        self,
        texts: list[str],
        rows: WordLayout | list[Any],
        lengths: np.ndarray,
        spans: list[Any] | None,
        ids: list[int],
    ) -> np.ndarray:
        """Each position's sensitivity (selective.md §4): the detectors' and the span column's character spans,
        mapped to the positions they overlap, whole words."""
        spec = self.config.sensitive
        assert spec is not None
        normalize = self._tokens.normalize if isinstance(self._tokens, HFTokens) else None
        found = sensitive_spans(
            self._detectors, texts, column=spec.column, column_values=spans, row_ids=ids, normalize=normalize
        )
        if isinstance(rows, WordLayout):
            assert rows.offsets is not None
            return sensitive_mask(rows.offsets, lengths, found, (rows.starts, rows.stops))
        offsets, _ = static_offsets([r.pieces or [] for r in rows], [r.seps or [""] for r in rows])
        return sensitive_mask(offsets, lengths, found)

    def read_batch(self, texts: list[str], row_ids: list[int], spans: list[Any] | None) -> TokenBatch:
        """A batch tokenized, classified and marked (selective.md §4) as the release reads it, with its tokens held
        flat; nothing is released (the counting pass reads batches so too: users.md §4)."""
        self._check_texts(texts, row_ids)
        self._ensure()
        assert self._tokens is not None
        n = len(texts)
        flat, lengths, rows = self._tokens.encode_flat(texts)
        cls, pos = self.engine.space.classify(flat)
        row_of = np.repeat(np.arange(n, dtype=np.int64), lengths)
        cand = cls == CANDIDATE
        sizes = np.bincount(row_of[cand], minlength=n)
        marked = None if self.config.sensitive is None else self._sensitive(texts, rows, lengths, spans, row_ids)
        return TokenBatch(flat, lengths, rows, cls, pos, row_of, cand, sizes, marked)

    def _process_batch(
        self, texts: list[str], row_ids: list[int], spans: list[Any] | None, users: UserBatch | None
    ) -> dict[str, list[Any]]:
        """Tokenize, classify, release and decode a batch, with the batch's tokens held flat.

        All rows' ids are concatenated once, so classification, the id replacement, the decode lists and
        the accounting counts are a few array operations per batch instead of per row; each token's
        draws come from its own row's keyed stream.
        """
        flat, lengths, rows, cls, pos, row_of, cand, sizes, marked = self.read_batch(texts, row_ids, spans)
        engine, tokens = self.engine, self._tokens
        space, step = engine.space, engine.step
        assert tokens is not None
        n = len(texts)
        bounds = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=bounds[1:])
        cand_pos = torch.from_numpy(pos[cand])
        sens = None if marked is None else marked & cand
        context = None
        if getattr(engine.mechanism, "CONTEXTUAL", False):  # issue 44: a contextual mechanism reads each token's row
            context = RowContext.from_flat(flat, lengths, np.flatnonzero(cand), row_of[cand])
        sens_t = None if sens is None else torch.from_numpy(sens[cand])
        if users is not None and self.users is not None:  # per-person: by level, consistent pseudonyms (users.md)
            runs = self.users.entities(flat, lengths, marked, cand)
            released = self.users.release(users, runs, cand_pos, sizes, sens_t, context)
        else:
            released = engine.release_flat(cand_pos, sizes.tolist(), row_ids, sensitive=sens_t, context=context)
        if step is not None and step.RELEASES_VECTORS:
            return self._vector_columns(lengths, bounds, cls, sizes, released, flat, users)
        out = flat.copy()
        if released.numel():
            out[cand] = space.candidate_ids.numpy()[released.numpy()]
        replace, spec = None, self.config.sensitive
        if marked is not None and spec is not None and spec.render == "placeholder":  # selective.md: one per word
            hf = isinstance(rows, WordLayout) and isinstance(tokens, HFTokens)
            replace = placeholder_words(out, marked, rows if hf else None, space.unk_id, tokens if hf else None, texts)
        b = bounds.tolist()
        result: dict[str, list[Any]] = {}
        structural = cls == STRUCTURAL
        if isinstance(tokens, HFTokens):
            assert isinstance(rows, WordLayout)
            result[self.text_column] = tokens.decode_flat(out, lengths, structural, rows, replace)
        else:
            assert isinstance(rows, list) and space.words is not None
            assert isinstance(tokens, WordTokens)
            out_l = out.tolist()
            m = None if marked is None else marked.tolist()
            result[self.text_column] = [
                tokens.decode_row(out_l[b[i] : b[i + 1]], row, space.words, None if m is None else m[b[i] : b[i + 1]])
                for i, row in enumerate(rows)
            ]
        flat_list = out.tolist()
        result["input_ids"] = [flat_list[b[i] : b[i + 1]] for i in range(n)]
        if isinstance(tokens, HFTokens):
            result["attention_mask"] = [[1] * int(m) for m in lengths.tolist()]
        self._columns_and_totals(result, lengths, sizes, row_of, structural, out, sens, users)
        return result

    def _columns_and_totals(
        self,
        result: dict[str, list[Any]],
        lengths: np.ndarray,
        sizes: np.ndarray,
        row_of: np.ndarray,
        structural: np.ndarray,
        out: np.ndarray | None,
        sens: np.ndarray | None = None,
        users: UserBatch | None = None,
    ) -> None:
        """``dp_tokens``, ``dp_epsilon`` (and ``dp_delta``), ``dp_sensitive_tokens`` with ``sensitive``, per row,
        and the running totals (accounting.md §2, selective.md §6)."""
        space, claim = self.engine.space, self.engine.claim
        n = lengths.size
        n_sens = kept = None
        if sens is None:
            # a row's ε and δ are one product dp_tokens · (per-token value) (accounting.md §2), as row_epsilon forms it
            e1, d1 = claim.row_epsilon(1), claim.row_delta(1)
            with np.errstate(invalid="ignore"):  # 0 · ∞ is nan, as for a Python float (ε = ∞ in test mode)
                eps = None if e1 is None else sizes.astype(np.float64) * e1
                deltas = None if d1 is None else sizes.astype(np.float64) * d1
            has_delta = claim.delta_token > 0
        else:  # selective: each position at its own class's ε_tok, summed over the row
            sens_claim = self.engine.sensitive_claim
            assert sens_claim is not None and self.config.sensitive is not None
            n_sens = np.bincount(row_of[sens], minlength=n)
            keep = self.config.sensitive.others == "keep"
            kept = sizes - n_sens if keep else np.zeros(n, dtype=np.int64)
            eps, deltas = selective_rows(n_sens, sizes - n_sens - kept, sens_claim, None if keep else claim)
            has_delta = sens_claim.delta_token > 0 or (not keep and claim.delta_token > 0)
            sizes = sizes - kept
            result["dp_sensitive_tokens"] = n_sens.tolist()
        if users is not None and self.users is not None:  # each row at its user's level (users.md §2)
            eps, deltas, has_delta = self.users.row_columns(result, users, sizes, n_sens)
        result["dp_tokens"] = sizes.tolist()
        result["dp_epsilon"] = [None] * n if eps is None else eps.tolist()
        if has_delta:
            result["dp_delta"] = [None] * n if deltas is None else deltas.tolist()
        n_struct = np.bincount(row_of[structural], minlength=n)
        pad = space.pad_id
        if out is not None and pad is not None:
            n_pad = np.bincount(row_of[structural & (out == pad)], minlength=n)
        else:
            n_pad = np.zeros(n, dtype=np.int64)
        passthrough = lengths - n_struct - sizes - (0 if kept is None else kept)
        columns = (sizes, n_struct - n_pad, n_pad, passthrough, eps, deltas, n_sens, kept)
        if users is not None and self.users is not None:  # dropped rows out, each user's sums (users.md §3, §6)
            self.users.add_rows(self.totals, users, columns)
        else:
            self.totals.add_rows(*columns)

    def _vector_columns(
        self,
        lengths: np.ndarray,
        bounds: np.ndarray,
        cls: np.ndarray,
        sizes: np.ndarray,
        released: torch.Tensor,
        flat: np.ndarray,
        users: UserBatch | None = None,
    ) -> dict[str, list[Any]]:
        """``postprocess="vector"``: ``inputs_embeds`` per row (postprocess.md §5); no text, no ``input_ids``.

        Privatized positions hold the noisy vector; structural positions hold the model's own embedding
        (public); passthrough positions hold their own embedding where one exists (they are released
        as they are anyway), zeros otherwise. ``attention_mask`` is unchanged.
        """
        space = self.engine.space
        n = lengths.size
        k = int(released.shape[1]) if released.ndim == 2 and released.numel() else space.d
        full = space.E_full
        mat = torch.zeros((int(flat.size), k), dtype=torch.float32)
        other = np.nonzero(cls != CANDIDATE)[0]
        if full is not None and k == full.shape[1] and other.size:
            ids = torch.from_numpy(flat[other])
            ok = (ids >= 0) & (ids < full.shape[0])
            mat[torch.from_numpy(other)[ok]] = full[ids[ok].to(full.device)].cpu()
        cand_idx = torch.from_numpy(np.nonzero(cls == CANDIDATE)[0])
        if cand_idx.numel():
            mat[cand_idx] = released.to(torch.float32).cpu()
        b = bounds.tolist()
        embeds = [mat[b[i] : b[i + 1]].tolist() for i in range(n)]
        result: dict[str, list[Any]] = {"inputs_embeds": embeds}
        if space.kind == "hf":
            result["attention_mask"] = [[1] * int(m) for m in lengths.tolist()]
        row_of = np.repeat(np.arange(n, dtype=np.int64), lengths)
        # as before: padding is not told apart from other structural tokens in this mode
        self._columns_and_totals(result, lengths, sizes, row_of, cls == STRUCTURAL, None, users=users)
        # the original text is not released in this mode: the text column becomes empty strings
        result[self.text_column] = ["" for _ in range(n)]
        return result
