"""The release engine: what a :class:`~hf_textdp.Privatizer` releases and how it is reported.

It builds the mechanism (and post-processing step) from a config, one per piece class where
class-preserving replacement splits the candidate set (space.md §7), derives each row's keyed stream
(randomness.md), runs the release of candidate positions (locally, or through the GPU release service
when this process is one of its workers) and builds the privacy report (accounting.md §3). It never
tokenizes or decodes: the ``datasets.map`` contract (:mod:`hf_textdp.privatizer`), the tokenizer, the
collators, the runners and the bench call it with candidate positions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from .accounting import Claim, Totals, build_report, combine_class_claims
from .config import PrivatizerConfig
from .errors import InvalidParameterError
from .io.models import load_space
from .mechanisms.base import AdditiveMechanism, Mechanism, SelectionMechanism
from .mechanisms.context import ContextualSampler, RowContext
from .mechanisms.limits import refuse_unusable_epsilon
from .postprocess import PostprocessStep, UnsafePostprocessStep, unsafe_claim
from .release_report import class_sections, config_key, measured_recovery, sensitive_section
from .rng import Streams, derive_row_seeds, fresh_seed, streams_for_rows, validate_stream
from .scale import scale_stats
from .space import ClassPart, EmbeddingSpace
from .users.report import UserTotals, per_person_report
from .utils.logging import get_logger, warn_once
from .utils.release_client import is_service_worker, remote_release


__all__ = ["ClassRelease", "ReleaseEngine", "config_key", "measured_recovery"]

logger = get_logger("hf_textdp.privatizer")  # the name the unsafe-step warning has always carried


#: tokens released in one mechanism call: a longer batch (or one row of a million tokens) goes through in
#: chunks of this many, each token drawing from its own keyed stream, so the output is the one call's and the
#: noise and search buffers stay bounded (a few hundred MB at d = 384)
RELEASE_CHUNK = 1 << 16


def _refuse_unusable(config: PrivatizerConfig, claim: Claim, releases: Sequence[ClassRelease], name: str) -> None:
    """Refuse ``config.epsilon`` where its releases would carry no privacy (:mod:`hf_textdp.mechanisms.limits`)."""
    probes = [(r.mech, r.part.space, r.claim) for r in releases]
    refuse_unusable_epsilon(
        config.epsilon,
        claim,
        probes,
        lambda e: dataclasses.replace(config, epsilon=e, sensitive=None).build()[0],
        name=name,
    )


@dataclass
class ClassRelease:
    """What releases one piece class (space.md §7): the class, its own mechanism and step, and its claim."""

    part: ClassPart
    mech: Mechanism
    step: PostprocessStep | None
    claim: Claim
    positions: torch.Tensor  # [V_c] int64: the class's local position -> position in C


class ReleaseEngine:
    """The release of one configuration under one key: ``(seed, split, stream)`` as a :class:`Privatizer` holds them.

    Lazy: the model and the mechanisms load on first use (:meth:`load`). Not pickled: a privatizer builds
    its engine again after unpickling.
    """

    def __init__(self, config: PrivatizerConfig, seed: int | None, split: str, stream: int) -> None:
        self.config = config
        self.seed = seed
        self.split = split
        self.stream = stream
        self._space: EmbeddingSpace | None = None
        self._mech: Mechanism | None = None
        self._step: PostprocessStep | None = None
        self._claim: Claim | None = None
        self._releases: list[ClassRelease] = []
        self._class_of: torch.Tensor | None = None  # [V] class index of each position in C (split only)
        self._local: torch.Tensor | None = None  # [V] position inside its class's space (split only)
        self._device_maps: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # the two above, per device
        # selective privatization (docs/mechanisms/selective.md): one release per class at sensitive["epsilon"]
        self._sens_releases: list[ClassRelease] = []
        self._sens_claim: Claim | None = None
        #: False for an engine of per-person scaling (users.md §3): the GPU release service releases at the
        #: configured ε only, so such an engine releases in its own process
        self.remote_ok = True

    @property
    def space(self) -> EmbeddingSpace:
        self.load()
        assert self._space is not None
        return self._space

    @property
    def mechanism(self) -> Mechanism:
        self.load()
        assert self._mech is not None
        return self._mech

    @property
    def step(self) -> PostprocessStep | None:
        """The post-processing step (``None`` for selection mechanisms)."""
        self.load()
        return self._step

    @property
    def claim(self) -> Claim:
        self.load()
        assert self._claim is not None
        return self._claim

    def load(self) -> None:
        """Build the space, the mechanisms (one per piece class where they are split) and the claim, once."""
        if self._space is not None:
            return
        # a worker of a GPU release service (run/release_service.py) does the host work only: its space on CPU
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
            self._releases = [ClassRelease(whole, mech, step, self._claim, torch.from_numpy(whole.positions))]
        _refuse_unusable(self.config, self._claim, self._releases, "epsilon")
        if step is not None and step.UNSAFE:  # postprocess.md §7: the step reads the input, no guarantee is left
            self._claim = unsafe_claim(self._claim)
        if self._claim.guarantee == "none":
            warn_once(
                logger,
                f"unsafe:{self.config.mechanism}:{self.config.postprocess}",
                f"postprocess={self.config.postprocess!r} reads the original token: the output has NO privacy "
                "guarantee (dp_epsilon is null).",
            )
        self._mech, self._step, self._space = mech, step, space
        if self.config.sensitive is not None:
            self._load_sensitive(space)
        self._bind_contextual(space)

    # ---- contextual mechanisms (issue 44, dp_mlm.md): the masked LM of config.model, bound to each class's mechanism
    def _bind_contextual(self, space: EmbeddingSpace) -> None:
        for rel in [*self._releases, *self._sens_releases]:
            if getattr(rel.mech, "CONTEXTUAL", False):
                from .io.masked_lm import load_masked_lm

                rel.mech.bind(load_masked_lm(self.config.model, space))  # type: ignore[attr-defined]

    def _load_sensitive(self, space: EmbeddingSpace) -> None:
        """The sensitive class of each piece class: the same mechanism at ``sensitive["epsilon"]`` on the same
        class space (selective.md §6), so a sensitive position's law is its mechanism's at ε_s."""
        sens_config = self.config.sensitive_config()
        _, step = sens_config.build()
        if step is not None and step.RELEASES_VECTORS:
            raise InvalidParameterError(
                f"sensitive: postprocess={self.config.postprocess!r} releases vectors, not tokens; selective "
                "privatization needs a token release (postprocess='nearest' or another token step)."
            )
        releases = []
        for rel in self._releases:
            mech, step = sens_config.build()
            mech.setup(rel.part.space)
            releases.append(ClassRelease(rel.part, mech, step, mech.claim(rel.part.space), rel.positions))
        self._sens_releases = releases
        if len(releases) == 1:
            self._sens_claim = releases[0].claim
        else:
            assert self._class_of is not None and self._local is not None
            claims = [r.claim for r in releases]
            self._sens_claim = combine_class_claims(claims, self._class_of.tolist(), self._local.tolist())
        _refuse_unusable(sens_config, self._sens_claim, releases, 'sensitive["epsilon"]')

    @property
    def sensitive_claim(self) -> Claim | None:
        """The claim of sensitive positions (``None`` without ``sensitive``)."""
        self.load()
        return self._sens_claim

    def _split_by_class(self, space: EmbeddingSpace, parts: list[ClassPart]) -> None:
        """Class-preserving replacement (space.md §7): a mechanism of its own on each class's space."""
        releases = []
        for part in parts:
            mech, step = self.config.build()
            mech.setup(part.space)
            releases.append(ClassRelease(part, mech, step, mech.claim(part.space), torch.from_numpy(part.positions)))
        class_of, local = space.position_class().astype(np.int64), space.local_positions()
        self._releases = releases
        self._class_of, self._local = torch.from_numpy(class_of), torch.from_numpy(local)
        self._device_maps = {}
        self._claim = combine_class_claims([r.claim for r in releases], class_of.tolist(), local.tolist())

    @property
    def classes(self) -> list[ClassPart]:
        """The piece classes released separately (one part, ``"all"``, without class-preserving replacement)."""
        self.load()
        return [r.part for r in self._releases]

    @property
    def class_mechanisms(self) -> list[tuple[ClassPart, Mechanism]]:
        """Each released class with the mechanism set up on its space (evaluation reads the law from these)."""
        self.load()
        return [(r.part, r.mech) for r in self._releases]

    def class_report(self) -> list[dict[str, Any]] | None:
        """Each class's size, diameter and claim (the report's ``candidate_set.per_class``); ``None``: one space."""
        self.load()
        marker = self._space.piece_marker if self._space is not None else None
        return class_sections([(r.part, r.mech, r.claim) for r in self._releases], marker)

    def build_report(
        self, totals: Totals, training: dict[str, Any] | None = None, users: UserTotals | None = None
    ) -> dict[str, Any]:
        self.load()  # with ``users``, the report gains its per-user section (users.md §6)
        assert self._space is not None and self._mech is not None and self._claim is not None
        space, mech, claim = self._space, self._mech, self._claim
        stats = scale_stats(mech.scale_metric_matrix(space), store=space.store)
        eps = self.config.epsilon
        report = build_report(
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
            sensitive=self._sensitive_report(),
        )
        return per_person_report(report, self.config, users)

    def _sensitive_report(self) -> dict[str, Any] | None:
        """The report's ``sensitive`` section (selective.md §6; ``None`` without ``sensitive``)."""
        spec, claim = self.config.sensitive, self._sens_claim
        if spec is None or claim is None:
            return None
        per_class = [(r.part.name, r.claim) for r in self._sens_releases]
        return sensitive_section(spec, claim, per_class, self.config.epsilon, self._claim)

    def row_keys(self, row_ids: Sequence[int], stream: int | None = None) -> list[int]:
        """The Philox key of each row: derived from (seed, split, stream, row id), or fresh OS entropy unseeded."""
        stream = self.stream if stream is None else stream
        if self.seed is None:
            return [fresh_seed() for _ in row_ids]
        return derive_row_seeds(self.seed, [int(r) for r in row_ids], self.split, stream)

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
        self.load()
        if stream is not None:
            validate_stream(stream)
        return self._release(list(positions), list(row_ids), self.stream if stream is None else stream)

    def _release(self, positions: list[torch.Tensor], row_ids: list[int], stream: int) -> list[torch.Tensor]:
        """Run the mechanism (and post-processing) for each row's candidate positions; one result per row."""
        sizes = [int(p.numel()) for p in positions]
        flat = (
            torch.cat([p.to(torch.int64).cpu() for p in positions]) if positions else torch.empty(0, dtype=torch.int64)
        )
        res = self.release_flat(flat, sizes, row_ids, stream)
        empty = torch.empty(0, dtype=torch.int64)
        return [chunk if n else empty for chunk, n in zip(torch.split(res, sizes), sizes, strict=True)]

    def release_flat(
        self,
        positions: torch.Tensor,
        sizes: list[int],
        row_ids: list[int],
        stream: int | None = None,
        sensitive: torch.Tensor | None = None,
        context: RowContext | None = None,
    ) -> torch.Tensor:
        """The mechanism and post-processing over a batch's candidate positions, held flat (rows in order).

        Every token draws from its row's keyed stream at its own position (docs/mechanisms/randomness.md),
        so the whole batch goes through one mechanism call and one post-processing call, and a seeded
        row's output never depends on the batch. ``sensitive`` (bool ``[N]``): :meth:`release_streams`.
        Returns positions ``[N]`` int64 (or vectors ``[N, k]``) on CPU. ``context`` (contextual mechanisms only,
        issue 44): each token's row and index in it.
        """
        if not any(sizes):
            return torch.empty(0, dtype=torch.int64)
        keys = self.row_keys(row_ids, self.stream if stream is None else stream)
        return self.release_keys(keys, sizes, positions, sensitive, context)

    def release_keys(
        self,
        keys: list[int],
        sizes: list[int],
        positions: torch.Tensor,
        sensitive: torch.Tensor | None = None,
        context: RowContext | None = None,
    ) -> torch.Tensor:
        """:meth:`release_flat` of rows given by their Philox keys (per-person pseudonyms draw from keys of their
        own: docs/mechanisms/users.md §5)."""
        self.load()
        space = self._space
        assert space is not None
        if not any(sizes):
            return torch.empty(0, dtype=torch.int64)
        remote = remote_release() if self.remote_ok else None
        # a worker of the GPU release service: the parent process releases the batch (a contextual mechanism's
        # batch, which carries its rows, is released here: issue 44)
        if remote is not None and context is None:
            key_arr, size_arr = np.asarray(keys, dtype=np.int64), np.asarray(sizes, dtype=np.int64)
            pos = positions.numpy()
            if sensitive is not None:  # the mask travels in the positions' sign: -1 - p for a sensitive p
                pos = np.where(sensitive.numpy(), -1 - pos, pos)
            return torch.from_numpy(remote.release(key_arr, size_arr, pos))
        return self.release_streams(positions, streams_for_rows(keys, sizes, space.device), sensitive, context)

    def release_keyed(self, keys: np.ndarray, sizes: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """:meth:`release_streams` of rows given by their Philox keys and token counts, as arrays (the release
        service's handler: several workers' batches at once); a sensitive position comes as ``-1 - p``."""
        self.load()
        assert self._space is not None
        streams = streams_for_rows(torch.from_numpy(keys), sizes.tolist(), self._space.device)
        sens = positions < 0
        if not sens.any():
            return self.release_streams(torch.from_numpy(positions), streams).numpy()
        pos = np.where(sens, -1 - positions, positions)
        return self.release_streams(torch.from_numpy(pos), streams, torch.from_numpy(sens)).numpy()

    def release_streams(
        self,
        positions: torch.Tensor,
        streams: Streams,
        sensitive: torch.Tensor | None = None,
        context: RowContext | None = None,
    ) -> torch.Tensor:
        """The mechanism and post-processing of candidate ``positions`` ``[N]`` drawing from ``streams`` (N tokens).

        ``sensitive`` (bool ``[N]``, with ``config.sensitive``): the positions released by the sensitive classes
        at ``sensitive["epsilon"]``; with ``"others": "keep"`` the other positions are returned unchanged. The
        device part of a batch, without tokenizing, deriving keys or decoding: what ``hf-textdp bench`` times as
        "kernel only". Returns positions ``[N]`` int64 (or vectors ``[N, k]``) on CPU.
        """
        self.load()
        if positions.numel() > RELEASE_CHUNK:  # bounded memory for any row or batch length: the same draws
            parts = [
                self.release_streams(
                    positions[a : a + RELEASE_CHUNK],
                    streams.slice(a, a + RELEASE_CHUNK),
                    None if sensitive is None else sensitive[a : a + RELEASE_CHUNK],
                    None if context is None else context.slice(a, a + RELEASE_CHUNK),
                )
                for a in range(0, int(positions.numel()), RELEASE_CHUNK)
            ]
            return torch.cat(parts)
        selective = sensitive is not None and bool(self._sens_releases)
        if len(self._releases) == 1 and not selective:
            return self._release_class(self._releases[0], positions, streams, context)
        # Each class on its own space: a token's draws depend on its key and position only, so releasing a
        # class's tokens apart from the others draws exactly what they would draw in one call. Sensitive
        # positions are classes of their own (index + n_classes), released at sensitive["epsilon"].
        # The split runs where the streams are (on a GPU: no host passes over the batch between the classes'
        # kernels); every class is released before the positions are assembled on the host.
        n_cls = len(self._releases)
        groups = self._releases + (self._sens_releases if selective else [])
        keep = selective and self.config.sensitive is not None and self.config.sensitive.others == "keep"
        pos = positions.to(streams.device)
        if n_cls > 1:
            class_of, local_of = self._split_maps(streams.device)
            cls, loc = class_of[pos], local_of[pos]
        else:
            cls, loc = torch.zeros_like(pos), pos
        if selective:
            assert sensitive is not None
            cls = cls + n_cls * sensitive.to(device=streams.device, dtype=cls.dtype)
        # the tokens grouped by class in one sort (each class's tokens in batch order), the group sizes read
        # in one synchronisation
        order = torch.argsort(cls, stable=True)
        counts = torch.bincount(cls, minlength=len(groups)).tolist()
        starts = np.concatenate([[0], np.cumsum(counts)]).tolist()
        results = []
        for g, rel in enumerate(groups):
            a, b = starts[g], starts[g + 1]
            idx = order[a:b]
            released = b > a and not (keep and g < n_cls)  # "keep": the other positions are not released
            ctx = None if context is None or not released else context.select(idx)
            results.append((a, b, self._release_class(rel, loc[idx], streams.select(idx), ctx) if released else None))
        order_cpu = order.cpu()
        out = positions.clone() if keep else torch.empty_like(positions)
        for rel, (a, b, res) in zip(groups, results, strict=True):
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
    def _release_class(
        rel: ClassRelease, positions: torch.Tensor, streams: Streams, context: RowContext | None = None
    ) -> torch.Tensor:
        """One class's mechanism and post-processing over its local positions; positions (or vectors) on CPU."""
        space, mech, step = rel.part.space, rel.mech, rel.step
        if getattr(mech, "CONTEXTUAL", False):  # issue 44: the token's row reaches a contextual mechanism only
            return cast("ContextualSampler", mech).sample(space, positions, streams, context=context).cpu()
        if isinstance(mech, SelectionMechanism):
            return mech.sample(space, positions, streams).cpu()
        assert isinstance(mech, AdditiveMechanism) and step is not None
        z = mech.perturb_positions(space, positions, streams)
        if isinstance(step, UnsafePostprocessStep):  # postprocess.md §7: the only path that sees the inputs
            res = step.apply_unsafe(z, mech, space, streams, positions)
        else:
            res = step.apply(z, mech, space, streams)
        return res.cpu()
