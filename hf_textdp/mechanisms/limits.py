"""Epsilons that would carry no privacy, refused before any row is released (issue 53, S2; accounting.md §2).

Three ways a large ε leaves a release with no meaningful bound, each refused with the largest ε that avoids it:

1. the per-token bound ε_tok (ε·diam for madlib, …) overflows to infinity;
2. the release is the identity in floating point: the noise is below the resolution of the vectors it is added
   to, so the output does not depend on the noise at all (a deterministic copy of the input);
3. a row's bound, the sum of its tokens' ε_tok (basic composition), overflows for a row of up to
   :data:`MAX_ROW_TOKENS` tokens, so rows would get a null ε while the report said "certified".

An additive mechanism is probed for the second on :data:`PROBE_TOKENS` candidates of the space with two fixed,
public noise keys (never the user's seed, so no output changes): noisy vectors that differ by at most :data:`ULPS`
units in the last place under both keys mean the noise is no more than rounding. A selection mechanism is judged
by its bound: where ε_tok exceeds :data:`SELECTION_LIMIT` (twice the log of the smallest float64 ratio, ≈ 1489),
the likelihood ratios it allows between outputs are not float64 numbers, so its sampler's probabilities of far
candidates are exactly 0 and it picks the near ones only (and the rejection samplers stop accepting far
candidates: at ε = 1e300 santext_plus's never ends).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch

from ..accounting import Claim
from ..errors import InvalidParameterError
from ..rng import derive_row_seed, streams_for_rows
from .base import AdditiveMechanism, Mechanism, SelectionMechanism


if TYPE_CHECKING:
    from ..space import EmbeddingSpace

__all__ = ["MAX_ROW_TOKENS", "PROBE_TOKENS", "ULPS", "SELECTION_LIMIT", "is_identity", "refuse_unusable_epsilon"]

#: the longest row whose bound must stay finite (far beyond what a tokenizer can hold in memory)
MAX_ROW_TOKENS = 2**32
#: candidates an additive mechanism is probed on, and the difference between two noise draws (in units in the last
#: place of the vectors) at or below which the noise is rounding, not noise
PROBE_TOKENS = 256
ULPS = 2
#: the per-token bound beyond which a selection mechanism's sampler cannot represent its law: 2·ln(1/2**-1074)
SELECTION_LIMIT = -2.0 * math.log(math.ulp(0.0))
#: the public key of the probe's noise (a constant: the probe never reads the user's seed)
_PROBE_KEY = 0x5EED_0F_1DE47179


def _draws(mech: AdditiveMechanism, space: EmbeddingSpace, n: int, draw: int) -> torch.Tensor:
    """The noisy vectors of the first ``n`` candidate positions under the public probe key number ``draw``."""
    streams = streams_for_rows([derive_row_seed(_PROBE_KEY, draw)], [n], device=space.device)
    return mech.perturb_positions(space, torch.arange(n, dtype=torch.int64), streams).cpu()


def _ulp(x: torch.Tensor) -> torch.Tensor:
    """The spacing of floating-point numbers at ``|x|`` (its unit in the last place)."""
    return torch.nextafter(x, torch.full_like(x, math.inf)) - x


def is_identity(mech: Mechanism, space: EmbeddingSpace, claim: Claim) -> bool:
    """Whether ``mech`` (set up on ``space``) releases in floating point what no noise would (module doc): an
    additive mechanism whose probe vectors do not depend on the noise key, or a selection mechanism whose bound
    exceeds :data:`SELECTION_LIMIT`."""
    if math.isinf(mech.epsilon):
        return False
    if isinstance(mech, AdditiveMechanism):
        n = min(PROBE_TOKENS, space.V)
        a, b = _draws(mech, space, n, 0), _draws(mech, space, n, 1)
        return bool((a - b).abs().le(ULPS * _ulp(torch.maximum(a.abs(), b.abs()))).all())
    if isinstance(mech, SelectionMechanism):
        return claim.epsilon_token is not None and claim.epsilon_token > SELECTION_LIMIT
    return False


def _row_bound_finite(claim: Claim) -> bool:
    tok = claim.epsilon_token
    return tok is None or math.isfinite(tok * MAX_ROW_TOKENS)


def _fault(claim: Claim, identity: Callable[[], bool]) -> str | None:
    """What makes ``claim``'s release carry no privacy (``None``: nothing)."""
    tok = claim.epsilon_token
    if tok is not None and not math.isfinite(tok):
        return "its per-token bound epsilon_token overflows to infinity"
    if identity():
        return (
            "the release is the identity in floating point: the noise at this epsilon is below the resolution of "
            "the vectors (an additive mechanism) or the sampler's probabilities of all but the nearest candidates "
            "are 0 (a selection mechanism), so the output copies the input"
        )
    if not _row_bound_finite(claim):
        assert tok is not None
        n = math.floor(sys.float_info.max / tok) + 1
        return (
            f"a row's bound, the sum of its tokens' epsilon_token = {tok:.3g}, overflows to infinity from {n:,} "
            "tokens on, so rows would get no finite epsilon"
        )
    return None


Probe = tuple[Mechanism, "EmbeddingSpace", Claim]  # a class's mechanism, set up on its space, and its claim


def _limits(probes: Sequence[Probe]) -> tuple[Claim, Callable[[], bool]]:
    """The largest per-token claim of the classes ``probes`` and their identity test (any class's release)."""
    worst = max((c for _, _, c in probes), key=lambda c: math.inf if c.epsilon_token is None else c.epsilon_token)
    return worst, lambda: any(is_identity(m, space, c) for m, space, c in probes)


def _at(epsilon: float, spaces: Sequence[EmbeddingSpace], build: Callable[[float], Mechanism]) -> list[Probe]:
    """The probes at another ``epsilon``: ``build(epsilon)`` set up on each class space."""
    out: list[Probe] = []
    for space in spaces:
        mech = build(epsilon)
        mech.setup(space)
        out.append((mech, space, mech.claim(space)))
    return out


def refuse_unusable_epsilon(
    epsilon: float,
    claim: Claim,
    probes: Sequence[Probe],
    build: Callable[[float], Mechanism],
    *,
    name: str = "epsilon",
) -> None:
    """Refuse ``epsilon`` (the parameter ``name``) when its release would carry no privacy (module doc).

    ``claim`` is the release's (combined) claim and ``probes`` each piece class's mechanism, space and claim
    (:func:`is_identity` is run on them); ``build(e)`` makes the mechanism at another epsilon, for the message's
    largest usable ε (bisection on a log scale: every fault grows with ε). ε = ∞ is the documented test mode
    (no noise), which says so itself.
    """
    if math.isinf(epsilon):
        return
    fault = _fault(claim, _limits(probes)[1])
    if fault is None:
        return
    spaces = [space for _, space, _ in probes]

    def usable(e: float) -> bool:
        try:
            return _fault(*_limits(_at(e, spaces, build))) is None
        except (InvalidParameterError, ArithmeticError):  # a mechanism that refuses this epsilon or cannot calibrate
            return False

    lo, hi = min(1.0, epsilon / 2), float(epsilon)
    while lo > 1e-300 and not usable(lo):  # the bisection's lower end must be usable
        lo, hi = lo * 1e-10, lo
    for _ in range(80):
        mid = math.sqrt(lo) * math.sqrt(hi)  # the geometric mean, without overflowing lo·hi
        if not lo < mid < hi:
            break
        lo, hi = (mid, hi) if usable(mid) else (lo, mid)
    raise InvalidParameterError(
        f"{name}={epsilon!r} is too large: the release would carry no privacy ({fault}); the largest {name} with "
        f"a finite row bound and a release that is not the identity here is {lo!r}."
    )
