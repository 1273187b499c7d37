"""santext_plus (Yue et al. 2021, SanText+, arXiv:2106.01221; santext.md §2).

santext_plus splits C by public token counts into the sensitive set V_S (the ⌊w·V⌋ least frequent
candidates, ties by lower id) and V_N = C ∖ V_S. A token in V_S is replaced by a draw of the santext
law restricted to V_S; a token in V_N is sanitised the same way with probability p and released
unchanged otherwise. Guarantee: the authors' utility-optimised metric LDP (UMLDP): for every protected
output y ∈ V_S, P[y | x] ≤ e^{ε·d(x, x') + ε₀}·P[y | x'] with ε₀ = ln(1/p); an output in V_N reveals
that the input was exactly that token. With w = 1 it is santext on C (ε·d metric DP). The counts must
come from public text, never from the data being privatized; files are read by the I/O layer
(:mod:`hf_textdp.io.frequencies`), which passes a :class:`CountSource`.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import torch

from ..accounting import Claim
from ..errors import InvalidParameterError, ParameterTypeError
from ..rng import Draw, Streams, as_streams
from ..scale import scale_stats
from ..validation import check_open_unit
from .exponential import ExponentialSampler
from .santext import Santext, candidate_tokens, check_counts, mapping_counts, sensitive_set


if TYPE_CHECKING:
    from ..space import EmbeddingSpace


__all__ = ["SantextPlus", "CountSource"]

UNPROTECTED_NOTE = (
    "santext_plus: tokens outside the sensitive set are not protected: non-sensitive tokens are released "
    "unchanged with probability 1 - p, and such an output reveals its input."
)


@runtime_checkable
class CountSource(Protocol):
    """Public counts prepared by the I/O layer (:class:`hf_textdp.io.frequencies.FileCounts`, ``CorpusCounts``)."""

    option: str  # the option value the report shows (a path)
    description: str

    def candidate_counts(self, space: EmbeddingSpace) -> npt.NDArray[Any]:
        """The count of every candidate, in candidate order (0 when absent)."""
        ...


def _count_repr(x: int | float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 2**63 else repr(float(x))


@dataclass
class _PlusState:
    """santext_plus's public constants for one space (built in ``setup``)."""

    space: EmbeddingSpace
    counts: npt.NDArray[Any]
    sensitive: torch.Tensor  # [n_S] int64 positions, ascending, on the space's device
    is_sensitive: torch.Tensor  # [V] bool
    sampler: ExponentialSampler  # the exact sampler over the rows of V_S
    source: dict[str, Any]


class SantextPlus(Santext):
    """SanText+: sanitise every sensitive token and a fraction p of the others (santext.md §2).

    Args:
        epsilon (`float`): metric ε per unit of Euclidean distance between rows of E.
        p (`float`, *optional*, defaults to `0.3`): probability that a non-sensitive token is sanitised, in (0, 1].
        w (`float`, *optional*, defaults to `0.9`): fraction of C treated as sensitive, in (0, 1].
        frequencies (`dict` or `str`, *optional*): public counts, a mapping token string → count (tokens
            as the tokenizer spells them, e.g. ``"##ing"``; words for static vectors), or the path of a
            JSON object or two-column TSV of the same. Candidates missing from it have count 0.
        frequency_corpus (`str`, *optional*): instead of ``frequencies``, the path of a public text file
            (one text per line) or JSON lines file (field ``text``), tokenized as privatization tokenizes
            and counted. It must not be the data being privatized; the pipeline checks this with
            :func:`hf_textdp.io.frequencies.check_not_input`.
        chunk_size (`int`, *optional*, defaults to `4096`): sensitive candidates per Gumbel-max chunk.

    Exactly one of ``frequencies`` and ``frequency_corpus`` is required.
    """

    name = "santext_plus"
    OPTIONS = {"p": 0.3, "w": 0.9, "frequencies": None, "frequency_corpus": None, "chunk_size": 4096}

    p: float
    w: float

    def _validate(self) -> None:
        super()._validate()
        opts = self.options
        self.p = check_open_unit(opts["p"], "p", closed_high=True)
        self.w = check_open_unit(opts["w"], "w", closed_high=True)
        freq, corpus = opts["frequencies"], opts["frequency_corpus"]
        if (freq is None) == (corpus is None):
            got = "neither" if freq is None else "both"
            raise InvalidParameterError(
                f"frequencies / frequency_corpus: santext_plus needs exactly one source of public token counts, got "
                f"{got}. Allowed: frequencies=<mapping token -> count, or a JSON/TSV path> or "
                "frequency_corpus=<path of a public .txt or .jsonl file>."
            )
        self._freq_map: dict[str, int | float] | None = None
        self._source: CountSource | None = None
        if isinstance(freq, Mapping):
            self._freq_map = check_counts(freq)
            self._source_desc = f"mapping ({len(self._freq_map)} entries)"
        elif freq is not None:
            self._source = self._count_source(
                freq, "frequencies", f"frequencies must be a mapping token -> count or a file path, got {_type(freq)}."
            )
        else:
            self._source = self._count_source(
                corpus,
                "frequency_corpus",
                f"frequency_corpus must be the path of a public text or JSON lines file, got {_type(corpus)}.",
            )
        if self._source is not None:
            self._source_desc = self._source.description
        self._state: _PlusState | None = None

    @staticmethod
    def _count_source(value: Any, option: str, wrong_type: str) -> CountSource:
        if isinstance(value, CountSource):
            return value
        if isinstance(value, (str, os.PathLike)):
            raise ParameterTypeError(
                f"{option}: the file {os.fspath(value)!r} is read by the I/O layer; build santext_plus through "
                "PrivatizerConfig, or pass hf_textdp.io.frequencies.resolve_count_options(options)."
            )
        raise ParameterTypeError(wrong_type)

    def parameters(self) -> dict[str, Any]:
        out = super().parameters()
        if isinstance(self.options["frequencies"], Mapping):  # never copy a whole count table into the report
            out["frequencies"] = self._source_desc
        for key in ("frequencies", "frequency_corpus"):
            if isinstance(self.options[key], CountSource):
                out[key] = self.options[key].option
        return out

    # ---------------------------------------------------------------- public constants
    candidate_tokens = staticmethod(candidate_tokens)

    def candidate_counts(self, space: EmbeddingSpace) -> npt.NDArray[Any]:
        """Public count of every candidate, in candidate order (0 when absent)."""
        if self._freq_map is not None:
            return mapping_counts(self._freq_map, candidate_tokens(space))
        assert self._source is not None
        return self._source.candidate_counts(space)

    def sensitive_positions(self, space: EmbeddingSpace, counts: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """V_S from the public counts (santext.md §2); a hook for tests."""
        return sensitive_set(counts, self.w)

    def setup(self, space: EmbeddingSpace) -> None:
        self._prepare(space)

    def _prepare(self, space: EmbeddingSpace) -> _PlusState:
        st = self._state
        if st is not None and st.space is space:
            return st
        counts = self.candidate_counts(space)
        S = self.sensitive_positions(space, counts)
        if S.size == 0:
            raise InvalidParameterError(
                f"w: w*V must be >= 1 so that the sensitive set is not empty, got w={self.w!r} with V={space.V}."
            )
        dev = space.E.device
        sens = torch.from_numpy(S).to(dev)
        is_sens = torch.zeros(space.V, dtype=torch.bool, device=dev)
        is_sens[sens] = True
        tokens = candidate_tokens(space)
        nz = sorted((t, c) for t, c in zip(tokens, counts.tolist(), strict=True) if c != 0)
        h = hashlib.sha256("".join(f"{t}\t{_count_repr(c)}\n" for t, c in nz).encode("utf-8"))
        source = {"description": self._source_desc, "sha256": h.hexdigest(), "nonzero_candidates": len(nz)}
        st = _PlusState(
            space=space,
            counts=counts,
            sensitive=sens,
            is_sensitive=is_sens,
            sampler=ExponentialSampler(space.E, sens),
            source=source,
        )
        self._state = st
        return st

    # ---------------------------------------------------------------- sampling
    def sanitise_mask(self, u: torch.Tensor, is_sensitive: torch.Tensor) -> torch.Tensor:
        """Which tokens are sanitised: every sensitive one, and a non-sensitive one iff u < p."""
        return is_sensitive | (u < self.p)

    def sample(
        self, space: EmbeddingSpace, positions: torch.Tensor, streams: Streams | torch.Generator
    ) -> torch.Tensor:
        """Output positions ``[n]``: a coin u per token (sanitise V_N iff u < p), a draw over V_S (santext.md §2)."""
        dev = space.E.device
        positions = positions.to(dev, torch.int64)
        if positions.numel() == 0 or math.isinf(self.epsilon):
            return positions.clone()
        st = self._prepare(space)
        rs = as_streams(streams, positions.numel(), dev)
        u = rs.uniforms(Draw.COIN, 1)[:, 0]
        sanitise = self.sanitise_mask(u, st.is_sensitive[positions])
        out = positions.clone()
        rows = torch.nonzero(sanitise, as_tuple=True)[0]
        if rows.numel():
            j = st.sampler.sample(positions[rows], rs.select(rows), scale=self.score_scale(), gamma=math.inf)
            out[rows] = st.sensitive[j]
        return out

    # ---------------------------------------------------------------- accounting
    def epsilon0(self, space: EmbeddingSpace) -> float:
        """ε₀ = ln(1/p) when V_N is non-empty (0 when p = 1 or w = 1)."""
        st = self._prepare(space)
        if st.sensitive.numel() == space.V:
            return 0.0
        return math.log(1.0 / self.p)

    def claim(self, space: EmbeddingSpace) -> Claim:
        """UMLDP: ε·d + ln(1/p) on protected outputs; ε·d metric DP when w = 1 (santext.md §2, accounting.md §1)."""
        stats = scale_stats(space.E, store=space.store)
        eps = self.epsilon
        st = self._prepare(space)
        full = st.sensitive.numel() == space.V
        e0 = self.epsilon0(space)
        E64 = space.E.double()

        def pair_bound(a: int, b: int) -> float:
            return eps * float(torch.linalg.vector_norm(E64[a] - E64[b])) + e0

        return Claim(
            guarantee="metric_dp" if full else "umldp",
            metric="euclidean",
            epsilon=eps,
            delta=None,
            epsilon_token=eps * stats.diam + e0,
            delta_token=0.0,
            certified=True,
            # a non-sensitive token released unchanged (probability 1 − p) reveals itself: no row bound
            rows_bounded=full or self.p >= 1.0,
            not_covered=() if full else (UNPROTECTED_NOTE,),
            pair_bound=pair_bound,
        )

    def details(self, space: EmbeddingSpace) -> dict[str, Any]:
        st = self._prepare(space)
        full = st.sensitive.numel() == space.V
        return {
            "p": self.p,
            "w": self.w,
            "n_sensitive": int(st.sensitive.numel()),
            "epsilon0": self.epsilon0(space),
            "frequency_source": dict(st.source),
            "metric_dp": {"epsilon": self.epsilon, "metric": "euclidean"} if full else None,
            "note": "non-sensitive tokens are released unchanged with probability 1 - p",
        }


def _type(value: Any) -> str:
    return type(value).__name__
