"""``top2``: the nearest candidate with probability ``top2_p``, else the second nearest (postprocess.md §3)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..rng import Draw, Streams
from ..validation import check_open_unit
from .base import PostprocessStep, token_uniforms


if TYPE_CHECKING:
    from ..mechanisms.base import AdditiveMechanism
    from ..space import EmbeddingSpace


__all__ = ["Top2"]


class Top2(PostprocessStep):
    """Output the nearest candidate with probability ``top2_p``, else the second nearest (postprocess.md §3).

    n₁, n₂ are the first two candidates in the order (‖z − φ(y)‖₂, id) over all of C, by the exact
    search of space.md §5 with k = 2. One float64 uniform per vector comes from the token's keyed stream
    (its :attr:`~hf_textdp.rng.Draw.TOP2` draw). This is seed 002's "randomly output the first or second
    nearest neighbour", without its exclusion of the input (that is ``nearest_excluding_input``).

    Args:
        top2_p (`float`, *optional*, defaults to `0.5`): probability in [0, 1] of outputting n₁.
    """

    name = "top2"
    OPTIONS = {"top2_p": 0.5}

    def _validate(self) -> None:
        self.options["top2_p"] = check_open_unit(self.options["top2_p"], "top2_p", closed_low=True, closed_high=True)

    def apply(
        self,
        z: torch.Tensor,
        mechanism: AdditiveMechanism,
        space: EmbeddingSpace,
        streams: Streams,
    ) -> torch.Tensor:
        self.check_mechanism(mechanism)
        u = token_uniforms(streams, Draw.TOP2, z)
        nn = mechanism.search_index(space).search(z, 2).cpu()
        return torch.where(u < self.options["top2_p"], nn[:, 0], nn[:, 1])
