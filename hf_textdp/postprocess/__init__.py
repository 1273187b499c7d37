"""Post-processing of noisy vectors (postprocess.md): a registry of steps that map z to candidates.

A step is ``apply(z, mechanism, space, streams)``: it sees the noisy vectors, public data
and fresh randomness from each token's keyed stream (:class:`~hf_textdp.rng.Streams`), and
**never the original token** — that is why every step preserves the mechanism's guarantee (postprocess.md §1).

Steps (postprocess.md): ``nearest`` (§2), ``top2`` (§3), ``rank`` (§4, the fix of arXiv:2411.13784 §6), ``vector``
(§5), ``backproject`` (§6, projected mechanisms) and the unsafe ``nearest_excluding_input`` (§7),
which reads the input and therefore lives apart: it subclasses :class:`UnsafePostprocessStep`, runs
only through ``apply_unsafe(..., input_positions)``, and turns the claim into :func:`unsafe_claim`.
"""

from __future__ import annotations

from ..errors import InvalidParameterError, UnknownPostprocessError
from .base import Nearest, PostprocessStep, ProjectedMechanism, backproject_vectors
from .rank import Rank, median_rho1_subset
from .select import clear_neighbour_caches, rank_select, rank_select_knn, truncated_geometric_ranks
from .top2 import Top2
from .unsafe import NearestExcludingInput, UnsafePostprocessStep, unsafe_claim
from .vector import Backproject, Vector


__all__ = [
    "PostprocessStep",
    "UnsafePostprocessStep",
    "ProjectedMechanism",
    "Nearest",
    "Top2",
    "Rank",
    "Vector",
    "Backproject",
    "NearestExcludingInput",
    "register_postprocess",
    "get_postprocess_class",
    "list_postprocess",
    "postprocess_option_names",
    "unsafe_claim",
    "truncated_geometric_ranks",
    "rank_select",
    "rank_select_knn",
    "median_rho1_subset",
    "backproject_vectors",
    "clear_neighbour_caches",
]

_REGISTRY: dict[str, type[PostprocessStep]] = {}


def register_postprocess(name: str, cls: type[PostprocessStep], *, force: bool = False) -> None:
    if name in _REGISTRY and not force:
        raise InvalidParameterError(f"postprocess {name!r} is already registered; pass force=True to replace it.")
    _REGISTRY[name] = cls


def list_postprocess() -> list[str]:
    return sorted(_REGISTRY)


def get_postprocess_class(name: str) -> type[PostprocessStep]:
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownPostprocessError(
            f"Unknown postprocess {name!r}. Registered post-processing steps: {list_postprocess()}."
        ) from None


def postprocess_option_names() -> set[str]:
    """Every option declared by some registered step (used to route ``options`` keys)."""
    names: set[str] = set()
    for cls in _REGISTRY.values():
        names |= set(cls.OPTIONS)
    return names


register_postprocess("nearest", Nearest)
for _cls in (Top2, Rank, Vector, Backproject, NearestExcludingInput):
    register_postprocess(_cls.name, _cls)
del _cls
