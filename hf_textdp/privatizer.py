"""``Privatizer``: the ``datasets.map`` transform.

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
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .accounting import Claim, Totals, build_report, combine_class_claims
from .attack_table import measured_recovery
from .config import PrivatizerConfig
from .errors import ColumnNotFoundError, HfTextDPError, InvalidParameterError, InvalidRowError, ParameterTypeError
from .io.files import stat_identity
from .io.models import load_space, model_identity
from .mechanisms.base import AdditiveMechanism, Mechanism, SelectionMechanism
from .postprocess import PostprocessStep, UnsafePostprocessStep, unsafe_claim
from .rng import (
    STREAM_VERSION,
    Streams,
    derive_row_seeds,
    fresh_seed,
    streams_for_rows,
    validate_secret_seed,
    validate_split,
    validate_stream,
)
from .scale import scale_stats
from .space import CANDIDATE, STRUCTURAL, ClassPart, EmbeddingSpace
from .tokens import HFTokens, WordLayout, WordTokens, make_tokens
from .utils.gc_pause import gc_paused
from .utils.logging import get_logger, warn_once
from .utils.release_service import is_service_worker, remote_release
from .validation import row_id_fault


__all__ = ["Privatizer"]

logger = get_logger(__name__)


@dataclass
class _Release:
    """What releases one piece class (space.md §7): the class, its own mechanism and step, and its claim."""

    part: ClassPart
    mech: Mechanism
    step: PostprocessStep | None
    claim: Claim
    positions: torch.Tensor  # [V_c] int64: the class's local position -> position in C


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
        # A fresh nonce makes every unseeded Privatizer hash differently, so `datasets` never serves a
        # cached (already released) result for it: each unseeded map is a new release.
        self._nonce = secrets.token_hex(16) if self.seed is None else None
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._space: EmbeddingSpace | None = None
        self._mech: Mechanism | None = None
        self._step: PostprocessStep | None = None
        self._claim: Claim | None = None
        self._tokens: HFTokens | WordTokens | None = None
        self._releases: list[_Release] = []
        self._class_of: torch.Tensor | None = None  # [V] class index of each position in C (split only)
        self._local: torch.Tensor | None = None  # [V] position inside its class's space (split only)
        self._device_maps: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # the two above, per device
        self.totals = Totals()

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
            "inputs": self._inputs(),
        }

    def _inputs(self) -> str:
        """The noise stream's version and the identity of the files read (model or vector file, candidate vocab,
        frequency corpus): pickled, so the ``datasets`` fingerprint changes when one of them is edited and a
        cached map over the old file is not served (decision D4). Stat only: nothing is read or loaded here."""
        try:
            model = model_identity(self.config.model)
        except HfTextDPError:  # the map reports it when it loads the model
            model = f"unresolved {self.config.model}"
        paths = (self.config.candidate_spec.vocab, self.config.options.get("frequency_corpus"))
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
        self._init_runtime()

    def __repr__(self) -> str:  # never shows the seed
        seeded = "seeded" if self.seed is not None else "unseeded"
        return (
            f"Privatizer(mechanism={self.config.mechanism!r}, epsilon={self.config.epsilon!r}, "
            f"model={self.config.model!r}, text_column={self.text_column!r}, {seeded})"
        )

    # ---------------------------------------------------------------- lazy runtime
    @property
    def space(self) -> EmbeddingSpace:
        self._ensure()
        assert self._space is not None
        return self._space

    @property
    def mechanism(self) -> Mechanism:
        self._ensure()
        assert self._mech is not None
        return self._mech

    def _ensure(self) -> None:
        if self._space is not None:
            return
        # a worker of a GPU release service (utils/release_service.py) does the host work only: its space on CPU
        device = "cpu" if is_service_worker() else self.config.device
        space = load_space(self.config.model, device, self.config.candidates)
        mech, step = self.config.build()
        mech.setup(space)
        self._claim = mech.claim(space)
        parts = space.class_parts()
        if len(parts) > 1 and not (step is not None and step.RELEASES_VECTORS):
            self._split_by_class(space, parts)
        else:  # one space; vectors (postprocess="vector") are released before any token is chosen
            whole = space.whole_part()
            self._releases = [_Release(whole, mech, step, self._claim, torch.from_numpy(whole.positions))]
        if step is not None and step.UNSAFE:  # postprocess.md §7: the step reads the input, no guarantee is left
            self._claim = unsafe_claim(self._claim)
        if self._claim.guarantee == "none":
            warn_once(
                logger,
                f"unsafe:{self.config.mechanism}:{self.config.postprocess}",
                f"postprocess={self.config.postprocess!r} reads the original token: the output has NO privacy "
                "guarantee (dp_epsilon is null).",
            )
        self._tokens = make_tokens(space, self.config.passthrough)
        self._mech, self._step, self._space = mech, step, space

    def _split_by_class(self, space: EmbeddingSpace, parts: list[ClassPart]) -> None:
        """Class-preserving replacement (space.md §7): a mechanism of its own on each class's space."""
        releases = []
        for part in parts:
            mech, step = self.config.build()
            mech.setup(part.space)
            releases.append(_Release(part, mech, step, mech.claim(part.space), torch.from_numpy(part.positions)))
        class_of, local = space.position_class().astype(np.int64), space.local_positions()
        self._releases = releases
        self._class_of, self._local = torch.from_numpy(class_of), torch.from_numpy(local)
        self._device_maps = {}
        self._claim = combine_class_claims([r.claim for r in releases], class_of.tolist(), local.tolist())

    @property
    def classes(self) -> list[ClassPart]:
        """The piece classes released separately (one part, ``"all"``, without class-preserving replacement)."""
        self._ensure()
        return [r.part for r in self._releases]

    @property
    def class_mechanisms(self) -> list[tuple[ClassPart, Mechanism]]:
        """Each released class with the mechanism set up on its space (evaluation reads the law from these)."""
        self._ensure()
        return [(r.part, r.mech) for r in self._releases]

    def class_report(self) -> list[dict[str, Any]] | None:
        """Each class's size, diameter and claim (the report's ``candidate_set.per_class``); ``None``: one space."""
        self._ensure()
        if len(self._releases) < 2:
            return None
        out = []
        for r in self._releases:
            stats = scale_stats(r.mech.scale_metric_matrix(r.part.space), store=r.part.space.store)
            out.append(
                {
                    "name": r.part.name,
                    "marker": self._space.piece_marker if self._space is not None else None,
                    "size": r.part.space.V,
                    "median_rho1": stats.median_rho1,
                    "diam": stats.diam,
                    "epsilon_token": r.claim.epsilon_token,
                    "delta_token": r.claim.delta_token if r.claim.epsilon_token is not None else None,
                    "certified": r.claim.certified,
                    "details": r.mech.details(r.part.space),
                }
            )
        return out

    @property
    def claim(self) -> Claim:
        self._ensure()
        assert self._claim is not None
        return self._claim

    # ---------------------------------------------------------------- public API
    def privatize(self, texts: Sequence[str], row_ids: Sequence[int] | None = None) -> list[str]:
        """Privatize a list of texts; with a seed, text i uses row id ``row_ids[i]`` (default: i).

        Example:

        >>> priv.privatize(["a private review"])     # doctest: +SKIP
        ['a secluded review']
        """
        if isinstance(texts, str):
            raise ParameterTypeError("texts must be a list of str, got a single str (wrap it in a list).")
        ids = list(range(len(texts))) if row_ids is None else list(row_ids)
        if len(ids) != len(texts):
            raise InvalidParameterError(f"row_ids has {len(ids)} entries but texts has {len(texts)}.")
        out = self._process(list(texts), ids)
        result: list[str] = out[self.text_column]
        return result

    def __call__(
        self, batch: dict[str, list[Any]], indices: Sequence[int] | int | None = None
    ) -> dict[str, list[Any]]:
        """Transform a ``datasets`` batch: ``ds.map(priv, batched=True, with_indices=True)``."""
        if self.text_column not in batch:
            raise ColumnNotFoundError(
                f"text_column={self.text_column!r} is not in the dataset. Current columns in the dataset: "
                f"{sorted(batch)}."
            )
        texts = batch[self.text_column]
        single = not isinstance(texts, list)
        if single:  # non-batched map
            texts = [texts]
            if isinstance(indices, int):
                indices = [indices]
        if self.id_column is not None:
            if self.id_column not in batch:
                raise ColumnNotFoundError(
                    f"id_column={self.id_column!r} is not in the dataset. Current columns in the dataset: "
                    f"{sorted(batch)}."
                )
            raw_ids = batch[self.id_column]
            raw_ids = [raw_ids] if single else raw_ids
            at = [indices] if isinstance(indices, int) else indices  # the map's indices name a bad row
            row_ids = [self._check_id(v, i, at) for i, v in enumerate(raw_ids)]
            self._check_unique(row_ids, at)
        elif indices is not None:
            row_ids = [int(i) for i in indices]  # type: ignore[union-attr]
        elif self.seed is not None:
            raise InvalidParameterError(
                "indices: a seeded Privatizer needs row ids; call ds.map(priv, batched=True, with_indices=True) "
                "or pass id_column=."
            )
        else:
            row_ids = [0] * len(texts)  # unused: unseeded rows draw fresh entropy
        out = self._process(texts, row_ids)
        if self.config.keep_original:
            out[f"{self.text_column}_original"] = list(texts)
        if single:
            return {k: v[0] for k, v in out.items()}
        return out

    def privacy_report(self) -> dict[str, Any]:
        """The privacy report of accounting.md for what this object released in this process (a map served
        from the ``datasets`` cache, or run in ``num_proc`` workers, is not counted: it warns when nothing was)."""
        if self.totals.rows == 0:
            logger.warning(
                "privacy_report: this Privatizer privatized no rows in this process (a map served from the datasets "
                "cache, or run in num_proc worker processes, is not counted here): the report's totals are empty. "
                "For the totals of a whole dataset, save it with privatize_dataset(..., output_dir=...) and read "
                "privacy_report(output_dir).",
            )
        return self.build_report(self.totals)

    def build_report(self, totals: Totals, training: dict[str, Any] | None = None) -> dict[str, Any]:
        self._ensure()
        assert self._space is not None and self._mech is not None and self._claim is not None
        space, mech, claim = self._space, self._mech, self._claim
        stats = scale_stats(mech.scale_metric_matrix(space), store=space.store)
        eps = self.config.epsilon
        return build_report(
            mechanism=mech.name,
            parameters=mech.parameters(),
            postprocess=self.config.postprocess if mech.kind == "additive" else "none",
            postprocess_parameters=(
                self._step.report_parameters(mech, space)
                if self._step is not None and isinstance(mech, AdditiveMechanism)
                else {}
            ),
            claim=claim,
            details=mech.details(space),
            candidate_set={**space.candidate_set_info(), "per_class": self.class_report()},
            model=space.model_info(),
            scale={
                "metric": claim.metric or "euclidean",
                "median_rho1": stats.median_rho1,
                "min_rho1": stats.min_rho1,
                "diam": stats.diam,
                "epsilon_median_rho1": eps * stats.median_rho1,
                "epsilon_diam": eps * stats.diam,
            },
            totals=totals,
            projection=mech.projection(space),
            training=training,
            measured_recovery=measured_recovery(self.config),
        )

    # ---------------------------------------------------------------- the work
    def _check_id(self, value: Any, i: int, at: Sequence[int] | None) -> int:
        fault = row_id_fault(value)
        if fault is not None:
            raise InvalidRowError(
                f"{_row_name(i, at)}: id_column={self.id_column!r} must hold ints in [0, 2**63), got {fault}."
            )
        return int(value)

    def _check_unique(self, row_ids: list[int], at: Sequence[int] | None) -> None:
        """Refuse a repeated id: two rows with one id share their noise, and comparing their outputs shows where
        their texts differ (threat_model.md)."""
        if len(set(row_ids)) < len(row_ids):
            seen: dict[int, int] = {}
            for i, r in enumerate(row_ids):
                if r in seen:
                    assert self.id_column is not None
                    raise repeated_id_error(f"{_row_name(seen[r], at)} and {_row_name(i, at)}", self.id_column, r)
                seen[r] = i

    def _check_texts(self, texts: Sequence[Any], row_ids: Sequence[int]) -> None:
        for t, r in zip(texts, row_ids, strict=False):
            if not isinstance(t, str):
                raise InvalidRowError(f"row {r}: expected str in column {self.text_column!r}, got {type(t).__name__}.")

    def _process(self, texts: list[str], row_ids: list[int]) -> dict[str, list[Any]]:
        """:meth:`_process_batch` with Python's cyclic collector paused (its walks over the batch's many small
        lists cost a quarter of the host time; nothing in a batch forms a cycle)."""
        with gc_paused():
            return self._process_batch(texts, row_ids)

    def _process_batch(self, texts: list[str], row_ids: list[int]) -> dict[str, list[Any]]:
        """Tokenize, classify, release and decode a batch, with the batch's tokens held flat.

        All rows' ids are concatenated once, so classification, the id replacement, the decode lists and
        the accounting counts are a few array operations per batch instead of per row; each token's
        draws come from its own row's keyed stream.
        """
        self._check_texts(texts, row_ids)
        self._ensure()
        space, tokens, claim = self._space, self._tokens, self._claim
        assert space is not None and tokens is not None and claim is not None
        n = len(texts)
        flat, lengths, rows = tokens.encode_flat(texts)
        bounds = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=bounds[1:])
        cls, pos = space.classify(flat)
        row_of = np.repeat(np.arange(n, dtype=np.int64), lengths)
        cand = cls == CANDIDATE
        sizes = np.bincount(row_of[cand], minlength=n)
        cand_pos = torch.from_numpy(pos[cand])
        released = self._release_flat(cand_pos, sizes.tolist(), row_ids)
        if self._step is not None and self._step.RELEASES_VECTORS:
            return self._vector_columns(lengths, bounds, cls, sizes, released, flat)
        out = flat.copy()
        if released.numel():
            out[cand] = space.candidate_ids.numpy()[released.numpy()]
        b = bounds.tolist()
        result: dict[str, list[Any]] = {}
        structural = cls == STRUCTURAL
        if isinstance(tokens, HFTokens):
            assert isinstance(rows, WordLayout)
            result[self.text_column] = tokens.decode_flat(out, lengths, structural, rows)
        else:
            assert isinstance(rows, list) and space.words is not None
            out_l = out.tolist()
            result[self.text_column] = [
                tokens.decode_row(out_l[b[i] : b[i + 1]], row, space.words) for i, row in enumerate(rows)
            ]
        flat_list = out.tolist()
        result["input_ids"] = [flat_list[b[i] : b[i + 1]] for i in range(n)]
        if isinstance(tokens, HFTokens):
            result["attention_mask"] = [[1] * int(m) for m in lengths.tolist()]
        self._columns_and_totals(result, lengths, sizes, row_of, structural, out)
        return result

    def _columns_and_totals(
        self,
        result: dict[str, list[Any]],
        lengths: np.ndarray,
        sizes: np.ndarray,
        row_of: np.ndarray,
        structural: np.ndarray,
        out: np.ndarray | None,
    ) -> None:
        """``dp_tokens``, ``dp_epsilon`` (and ``dp_delta``) per row, and the running totals (accounting.md §2)."""
        space, claim = self._space, self._claim
        assert space is not None and claim is not None
        n = lengths.size
        result["dp_tokens"] = sizes.tolist()
        # a row's ε and δ are one product dp_tokens · (per-token value) (accounting.md §2), as row_epsilon forms it
        e1, d1 = claim.row_epsilon(1), claim.row_delta(1)
        with np.errstate(invalid="ignore"):  # 0 · ∞ is nan, as for a Python float (ε = ∞ in test mode)
            eps = None if e1 is None else sizes.astype(np.float64) * e1
            deltas = None if d1 is None else sizes.astype(np.float64) * d1
        result["dp_epsilon"] = [None] * n if eps is None else eps.tolist()
        if claim.delta_token > 0:
            result["dp_delta"] = [None] * n if deltas is None else deltas.tolist()
        n_struct = np.bincount(row_of[structural], minlength=n)
        pad = space.pad_id
        if out is not None and pad is not None:
            n_pad = np.bincount(row_of[structural & (out == pad)], minlength=n)
        else:
            n_pad = np.zeros(n, dtype=np.int64)
        self.totals.add_rows(sizes, n_struct - n_pad, n_pad, lengths - n_struct - sizes, eps, deltas)

    def _vector_columns(
        self,
        lengths: np.ndarray,
        bounds: np.ndarray,
        cls: np.ndarray,
        sizes: np.ndarray,
        released: torch.Tensor,
        flat: np.ndarray,
    ) -> dict[str, list[Any]]:
        """``postprocess="vector"``: ``inputs_embeds`` per row (postprocess.md §5); no text, no ``input_ids``.

        Privatized positions hold the noisy vector; structural positions hold the model's own embedding
        (public); passthrough positions hold their own embedding where one exists (they are released
        as they are anyway), zeros otherwise. ``attention_mask`` is unchanged.
        """
        space = self._space
        assert space is not None
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
        self._columns_and_totals(result, lengths, sizes, row_of, cls == STRUCTURAL, None)
        # the original text is not released in this mode: the text column becomes empty strings
        result[self.text_column] = ["" for _ in range(n)]
        return result

    def release_positions(
        self, positions: Sequence[torch.Tensor], row_ids: Sequence[int], *, stream: int | None = None
    ) -> list[torch.Tensor]:
        """Privatize already-classified tokens: each row's positions in the candidate set C.

        The entry point for tokenizers and collators that tokenize themselves: row ``i``'s positions
        ``positions[i]`` (int64, into ``space.candidate_ids``) are released with row ``row_ids[i]``'s
        keyed stream of ``stream`` (default: this privatizer's), exactly as :meth:`privatize` releases
        a row's candidate tokens. Returns one result per row: positions ``[n_i]`` (or vectors for
        ``postprocess="vector"``), on CPU. Accounting of the release is the caller's.
        """
        self._ensure()
        if stream is not None:
            validate_stream(stream)
        return self._release(list(positions), list(row_ids), self.stream if stream is None else stream)

    def _release(self, positions: list[torch.Tensor], row_ids: list[int], stream: int) -> list[torch.Tensor]:
        """Run the mechanism (and post-processing) for each row's candidate positions; one result per row."""
        sizes = [int(p.numel()) for p in positions]
        flat = (
            torch.cat([p.to(torch.int64).cpu() for p in positions]) if positions else torch.empty(0, dtype=torch.int64)
        )
        res = self._release_flat(flat, sizes, row_ids, stream)
        empty = torch.empty(0, dtype=torch.int64)
        return [chunk if n else empty for chunk, n in zip(torch.split(res, sizes), sizes, strict=True)]

    def _release_flat(
        self, positions: torch.Tensor, sizes: list[int], row_ids: list[int], stream: int | None = None
    ) -> torch.Tensor:
        """The mechanism and post-processing over a batch's candidate positions, held flat (rows in order).

        Every token draws from its row's keyed stream at its own position (docs/mechanisms/randomness.md),
        so the whole batch goes through one mechanism call and one post-processing call, and a seeded
        row's output never depends on the batch. Returns positions ``[N]`` int64 (or vectors ``[N, k]``)
        on CPU.
        """
        space = self._space
        assert space is not None
        if not any(sizes):
            return torch.empty(0, dtype=torch.int64)
        stream = self.stream if stream is None else stream
        keys = self.row_keys(row_ids, stream)
        remote = remote_release()
        if remote is not None:  # a worker of the GPU release service: the parent process releases the batch
            key_arr, size_arr = np.asarray(keys, dtype=np.int64), np.asarray(sizes, dtype=np.int64)
            return torch.from_numpy(remote.release(key_arr, size_arr, positions.numpy()))
        return self.release_streams(positions, streams_for_rows(keys, sizes, space.device))

    def release_keyed(self, keys: np.ndarray, sizes: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """:meth:`release_streams` of rows given by their Philox keys and token counts, as arrays (the release
        service's handler: several workers' batches at once)."""
        self._ensure()
        assert self._space is not None
        streams = streams_for_rows(torch.from_numpy(keys), sizes.tolist(), self._space.device)
        return self.release_streams(torch.from_numpy(positions), streams).numpy()

    def release_streams(self, positions: torch.Tensor, streams: Streams) -> torch.Tensor:
        """The mechanism and post-processing of candidate ``positions`` ``[N]`` drawing from ``streams`` (N tokens).

        The device part of a batch, without tokenizing, deriving keys or decoding: what ``hf-textdp bench``
        times as "kernel only". Returns positions ``[N]`` int64 (or vectors ``[N, k]``) on CPU.
        """
        self._ensure()
        if len(self._releases) == 1:
            return self._release_class(self._releases[0], positions, streams)
        # Each class on its own space: a token's draws depend on its key and position only, so releasing a
        # class's tokens apart from the others draws exactly what they would draw in one call.
        # The split runs where the streams are (on a GPU: no host passes over the batch between the classes'
        # kernels); every class is released before the positions are assembled on the host.
        class_of, local_of = self._split_maps(streams.device)
        pos = positions.to(streams.device)
        cls, loc = class_of[pos], local_of[pos]
        # the tokens grouped by class in one sort (each class's tokens in batch order), the group sizes read
        # in one synchronisation
        order = torch.argsort(cls, stable=True)
        counts = torch.bincount(cls, minlength=len(self._releases)).tolist()
        starts = np.concatenate([[0], np.cumsum(counts)]).tolist()
        results = []
        for rel in self._releases:
            a, b = starts[rel.part.index], starts[rel.part.index + 1]
            idx = order[a:b]
            results.append((a, b, self._release_class(rel, loc[idx], streams.select(idx)) if b > a else None))
        order_cpu = order.cpu()
        out = torch.empty_like(positions)
        for rel, (a, b, res) in zip(self._releases, results, strict=True):
            if res is not None:
                out[order_cpu[a:b]] = rel.positions[res]
        return out

    def _split_maps(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The class and local position of every candidate position, on ``device`` (cached; on the CPU, the maps
        themselves)."""
        assert self._class_of is not None and self._local is not None
        key = str(device)
        if key not in self._device_maps:
            self._device_maps[key] = (self._class_of.to(device), self._local.to(device))
        return self._device_maps[key]

    @staticmethod
    def _release_class(rel: _Release, positions: torch.Tensor, streams: Streams) -> torch.Tensor:
        """One class's mechanism and post-processing over its local positions; positions (or vectors) on CPU."""
        space, mech, step = rel.part.space, rel.mech, rel.step
        if isinstance(mech, SelectionMechanism):
            return mech.sample(space, positions, streams).cpu()
        assert isinstance(mech, AdditiveMechanism) and step is not None
        z = mech.perturb_positions(space, positions, streams)
        if isinstance(step, UnsafePostprocessStep):  # postprocess.md §7: the only path that sees the inputs
            res = step.apply_unsafe(z, mech, space, streams, positions)
        else:
            res = step.apply(z, mech, space, streams)
        return res.cpu()

    def row_keys(self, row_ids: Sequence[int], stream: int | None = None) -> list[int]:
        """The Philox key of each row: derived from (seed, split, stream, row id), or fresh OS entropy unseeded."""
        stream = self.stream if stream is None else stream
        if self.seed is None:
            return [fresh_seed() for _ in row_ids]
        return derive_row_seeds(self.seed, [int(r) for r in row_ids], self.split, stream)


def _row_name(i: int, indices: Sequence[int] | None) -> str:
    """Row ``i`` of a batch, named by its dataset index where the map passes the indices."""
    return f"row {i} of the batch" if indices is None else f"row {int(indices[i])}"


def repeated_id_error(rows: str, id_column: str, value: int) -> InvalidRowError:
    """The error for an id that two ``rows`` hold (named, e.g. ``"rows 2 and 6"``): they would share their noise."""
    return InvalidRowError(
        f"{rows}: id_column={id_column!r} holds the id {value} twice; ids must be unique (two rows with one id "
        "would share their noise)."
    )
