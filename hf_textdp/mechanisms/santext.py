"""santext and santext_plus (Yue et al. 2021, SanText / SanText+, arXiv:2106.01221; spec §9.1, §9.2).

**santext** (spec §9.1) outputs y ∈ C with probability

    P[y | w] = exp(−(ε/2)·d(w, y)) / Σ_{y'∈C} exp(−(ε/2)·d(w, y'))          (the paper's Eq. 1)

with d the Euclidean distance between rows of the public matrix E. It is TEM (spec §6) with γ = ∞
and satisfies ε·d metric DP (δ = 0); per token ε_tok = ε·diam. Unlike the authors' code, no V × V
probability matrix is built (the exact rejection sampler of :mod:`~hf_textdp.mechanisms.exponential`)
and C is the tokenizer's candidate set, never the words of the data being sanitised.

**santext_plus** (spec §9.2) splits C by public token counts into the sensitive set V_S (the
⌊w·V⌋ least frequent candidates, ties by lower id) and V_N = C ∖ V_S. A token in V_S is replaced by a
draw of the santext law restricted to V_S; a token in V_N is sanitised the same way with probability
p and released unchanged otherwise. Guarantee: the authors' utility-optimised metric LDP (UMLDP):
for every protected output y ∈ V_S, P[y | x] ≤ e^{ε·d(x, x') + ε₀}·P[y | x'] with ε₀ = ln(1/p); an
output in V_N reveals that the input was exactly that token. With w = 1 it is santext on C (ε·d metric
DP). The counts must come from public text: never from the data being privatized.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import torch

from ..accounting import Claim
from ..errors import InvalidParameterError, ParameterTypeError
from ..rng import Draw, Streams, as_streams
from ..scale import scale_stats
from ..validation import check_int, check_open_unit
from .exponential import ExponentialSampler
from .tem import Tem


if TYPE_CHECKING:
    from ..space import EmbeddingSpace


__all__ = ["Santext", "SantextPlus", "sensitive_set", "load_frequencies", "check_not_input"]

UNPROTECTED_NOTE = (
    "santext_plus: tokens outside the sensitive set are not protected: non-sensitive tokens are released "
    "unchanged with probability 1 - p, and such an output reveals its input."
)


class Santext(Tem):
    """SanText: the exponential mechanism −(ε/2)·d over the whole candidate set (spec §9.1).

    Args:
        epsilon (`float`): metric ε per unit of Euclidean distance between rows of E.
        chunk_size (`int`, *optional*, defaults to `4096`): kept for configurations written before
            stream version 2; the sampler does not depend on it.

    Example:

    >>> mech = Santext(epsilon=2.0)
    >>> mech.gamma_for(30517)
    inf
    >>> Santext(epsilon=2.0, chunk_size=0)
    Traceback (most recent call last):
    ...
    hf_textdp.errors.InvalidParameterError: chunk_size must be an int >= 1, got 0.
    """

    name = "santext"
    OPTIONS = {"chunk_size": 4096}

    def _validate(self) -> None:
        self.beta = None
        self.gamma = math.inf
        self.sampler = "dense"
        self.chunk_size = check_int(self.options["chunk_size"], "chunk_size", minimum=1)

    def gamma_for(self, V: int) -> float:
        return math.inf

    def details(self, space: EmbeddingSpace) -> dict[str, Any]:
        stats = scale_stats(space.E, index=space.index, store=space.store)
        return {"metric_dp": {"epsilon": self.epsilon, "metric": "euclidean"}, "diam_exact": stats.diam_exact}


# --------------------------------------------------------------------------- counts and V_S
def sensitive_set(counts: npt.ArrayLike, w: float) -> npt.NDArray[np.int64]:
    """Positions of V_S: the first ⌊w·V⌋ candidates by (count ascending, position ascending) (spec §9.2).

    Args:
        counts (array of `V` numbers): public count of each candidate, in candidate (id) order.
        w (`float`): fraction of C treated as sensitive, in (0, 1].

    Returns:
        `numpy.ndarray` of int64: the positions of V_S, ascending. n_S = ⌊w·V + 10⁻¹²⌋ (the 10⁻¹²
        absorbs the float error of products such as 0.6·5 = 2.9999999999999996).

    Example:

    >>> sensitive_set([50, 7, 3, 3, 900], 0.6).tolist()
    [1, 2, 3]
    """
    c = np.asarray(counts)
    V = int(c.shape[0])
    n_s = int(math.floor(w * V + 1e-12))
    order = np.lexsort((np.arange(V), c))  # last key first: count, then position
    return np.sort(order[:n_s]).astype(np.int64)


def _parse_count(value: Any, where: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ParameterTypeError(f"frequencies: {where} must be a number, got {type(value).__name__}.")
    x = int(value) if isinstance(value, (int, np.integer)) else float(value)
    if not math.isfinite(x) or x < 0:
        raise InvalidParameterError(f"frequencies: {where} must be a finite count >= 0, got {value!r}.")
    return x


def _check_mapping(mapping: Mapping[Any, Any]) -> dict[str, int | float]:
    out: dict[str, int | float] = {}
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise ParameterTypeError(f"frequencies: keys must be token strings, got {type(key).__name__}.")
        out[key] = _parse_count(value, "the count of a token")
    return out


def load_frequencies(path: str | os.PathLike[str]) -> dict[str, int | float]:
    """Read public token counts from a JSON object ``{"token": count}`` or a two-column TSV file.

    The format is decided by content: a file whose first non-blank character is ``{`` is JSON; any
    other file is TSV, one ``token<TAB>count`` per line (split at the last tab, blank lines skipped).

    Raises:
        InvalidParameterError: the file is missing or malformed (the message names the line).
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise InvalidParameterError(
            f"frequencies: {str(path)!r} is not an existing file; allowed: a mapping token -> count, or the path "
            "of a JSON object or a two-column TSV file."
        )
    text = p.read_text(encoding="utf-8-sig")
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise InvalidParameterError(
                f"frequencies: {p.name} is not valid JSON ({err.msg} at line {err.lineno})."
            ) from err
        if not isinstance(data, dict):
            raise InvalidParameterError(f"frequencies: {p.name} must hold a JSON object token -> count.")
        return _check_mapping(data)
    out: dict[str, int | float] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if "\t" not in line:
            raise InvalidParameterError(
                f"frequencies: {p.name} line {lineno} is not 'token<TAB>count' (no tab found)."
            )
        token, raw = line.rsplit("\t", 1)
        try:
            value: int | float = int(raw.strip())
        except ValueError:
            try:
                value = float(raw.strip())
            except ValueError:
                raise InvalidParameterError(
                    f"frequencies: {p.name} line {lineno}: the count {raw.strip()!r} is not a number."
                ) from None
        out[token] = _parse_count(value, f"{p.name} line {lineno}")
    return out


def _corpus_texts(path: Path, block: int = 1024) -> Iterator[list[str]]:
    """Yield lists of texts from a plain-text file (one text per line) or JSON lines (the ``text`` field)."""
    is_jsonl = path.suffix.lower() in (".jsonl", ".ndjson")
    buf: list[str] = []
    with path.open(encoding="utf-8-sig") as fh:
        for lineno, line in enumerate(fh, start=1):
            line = line.rstrip("\r\n")
            if is_jsonl:
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as err:
                    raise InvalidParameterError(
                        f"frequency_corpus: {path.name} line {lineno} is not valid JSON ({err.msg})."
                    ) from err
                text = obj.get("text") if isinstance(obj, dict) else obj
                if not isinstance(text, str):
                    raise InvalidParameterError(
                        f"frequency_corpus: {path.name} line {lineno} has no string field 'text'."
                    )
                buf.append(text)
            else:
                buf.append(line)
            if len(buf) >= block:
                yield buf
                buf = []
    if buf:
        yield buf


def check_not_input(frequency_corpus: Any, input_source: Any) -> None:
    """Raise if ``frequency_corpus`` is the dataset being privatized (spec §9.2).

    The mechanism never sees the input dataset, so the pipeline calls this with its own source: two
    paths are the same file or folder, two strings (hub ids) are equal, or two ``datasets`` objects
    have the same fingerprint.

    Raises:
        InvalidParameterError: naming ``frequency_corpus``.

    Example:

    >>> check_not_input("public_corpus.txt", "reviews.jsonl")
    >>> check_not_input("reviews.jsonl", "./reviews.jsonl")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    hf_textdp.errors.InvalidParameterError: frequency_corpus must be public text, not the dataset being ...
    """
    if frequency_corpus is None or input_source is None:
        return
    same = False
    fa, fb = getattr(frequency_corpus, "_fingerprint", None), getattr(input_source, "_fingerprint", None)
    if fa is not None and fb is not None:
        same = fa == fb
    elif isinstance(frequency_corpus, (str, os.PathLike)) and isinstance(input_source, (str, os.PathLike)):
        a, b = Path(frequency_corpus).expanduser(), Path(input_source).expanduser()
        if os.fspath(frequency_corpus) == os.fspath(input_source):
            same = True
        elif a.exists() and b.exists():
            same = os.path.samefile(a, b)
        else:
            same = a.resolve() == b.resolve()
    if same:
        shown = os.fspath(frequency_corpus) if isinstance(frequency_corpus, (str, os.PathLike)) else "<dataset>"
        raise InvalidParameterError(
            "frequency_corpus must be public text, not the dataset being privatized "
            f"(got the input itself, {str(shown)!r})."
        )


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
    """SanText+: sanitise every sensitive token and a fraction p of the others (spec §9.2).

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
            :func:`check_not_input`.
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
        self._corpus: Path | None = None
        if freq is not None:
            if isinstance(freq, Mapping):
                self._freq_map = _check_mapping(freq)
                self._source_desc = f"mapping ({len(self._freq_map)} entries)"
            elif isinstance(freq, (str, os.PathLike)):
                self._freq_map = load_frequencies(freq)
                self._source_desc = f"file {Path(freq).name}"
            else:
                raise ParameterTypeError(
                    f"frequencies must be a mapping token -> count or a file path, got {type(freq).__name__}."
                )
        else:
            if not isinstance(corpus, (str, os.PathLike)):
                raise ParameterTypeError(
                    "frequency_corpus must be the path of a public text or JSON lines file, got "
                    f"{type(corpus).__name__}."
                )
            path = Path(corpus).expanduser()
            if not path.is_file():
                raise InvalidParameterError(
                    f"frequency_corpus: {os.fspath(corpus)!r} is not an existing file; allowed: the path of a public "
                    "text file (one text per line) or a JSON lines file with a 'text' field."
                )
            self._corpus = path
            self._source_desc = f"corpus {path.name}"
        self._state: _PlusState | None = None

    def parameters(self) -> dict[str, Any]:
        out = super().parameters()
        if isinstance(self.options["frequencies"], Mapping):  # never copy a whole count table into the report
            out["frequencies"] = self._source_desc
        elif self.options["frequencies"] is not None:
            out["frequencies"] = os.fspath(self.options["frequencies"])
        if self.options["frequency_corpus"] is not None:
            out["frequency_corpus"] = os.fspath(self.options["frequency_corpus"])
        return out

    # ---------------------------------------------------------------- public constants
    @staticmethod
    def candidate_tokens(space: EmbeddingSpace) -> list[str]:
        """The token string of each candidate, in candidate order (the keys ``frequencies`` uses)."""
        ids = space.candidate_ids.tolist()
        if space.words is not None:
            return [space.words[i] for i in ids]
        tokens: list[str] = space.tokenizer.convert_ids_to_tokens(ids)
        return tokens

    def candidate_counts(self, space: EmbeddingSpace) -> npt.NDArray[Any]:
        """Public count of every candidate, in candidate order (0 when absent)."""
        if self._freq_map is not None:
            get = self._freq_map.get
            vals = [get(t, 0) for t in self.candidate_tokens(space)]
            return np.asarray(vals, dtype=np.float64 if any(isinstance(v, float) for v in vals) else np.int64)
        from ..tokens import make_tokens

        assert self._corpus is not None
        tokens = make_tokens(space)
        counts = np.zeros(space.V, dtype=np.int64)
        from ..space import CANDIDATE

        for texts in _corpus_texts(self._corpus):
            for row in tokens.encode(texts):
                cls, pos = space.classify(row.ids)
                counts += np.bincount(pos[cls == CANDIDATE], minlength=space.V)
        return counts

    def sensitive_positions(self, space: EmbeddingSpace, counts: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """V_S from the public counts (spec §9.2); a hook for tests."""
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
        tokens = self.candidate_tokens(space)
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
        """Output positions ``[n]``: a coin u per token (sanitise V_N iff u < p), then a draw over V_S (§9.2)."""
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
        """UMLDP: ε·d + ln(1/p) on protected outputs; ε·d metric DP when w = 1 (spec §9.2, §10.1)."""
        stats = scale_stats(space.E, index=space.index, store=space.store)
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
