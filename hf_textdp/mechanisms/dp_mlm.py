"""dp_mlm: the exponential mechanism over a masked LM's clipped logits (Meisenbacher et al., ACL Findings 2024).

DP-MLM (Meisenbacher, Chevli, Vladika and Matthes, "DP-MLM: Differentially Private Text Rewriting Using
Masked Language Models", Findings of ACL 2024; dp_mlm.md) replaces the token at position i of a row x
by y ∈ C with probability

    P[y | x, i] = exp(ε·u_i(y; x) / (2Δ)) / Σ_{y'∈C} exp(ε·u_i(y'; x) / (2Δ)),
    u_i(y; x) = clip(ℓ_i(x)_y, a, b),   Δ = b − a,

with ℓ_i(x) the masked LM's logits at position i given the row (dp_mlm.md §2). Clipping keeps every
utility in [a, b] whatever the row holds, so |u_i(y; x) − u_i(y; x')| ≤ Δ for *any* two rows x, x' and
the draw at each position is ε-DP (pure, δ = 0) with respect to any change of the row (McSherry and
Talwar 2007): not metric DP. A row's ε is the sum over its privatized positions (dp_mlm.md §5).

Each position reads one float64 uniform of its keyed stream (:attr:`~hf_textdp.rng.Draw.SAMPLER`) and
inverts the CDF of the float64 scores, so a seeded output never depends on the batch (up to the
last-ulp rounding of the model's forward, which moves a draw only at a near-tie).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from ..accounting import Claim
from ..errors import InvalidParameterError, ParameterTypeError
from ..rng import Draw, Streams, as_streams
from ..validation import check_choice, check_int
from .base import SelectionMechanism
from .context import RowContext
from .mlm_logits import MaskedLMScorer


if TYPE_CHECKING:
    from ..space import EmbeddingSpace


__all__ = ["DpMlm", "DEFAULT_CLIP", "inverse_cdf", "check_clip"]

#: the reference implementation's bounds for FacebookAI/roberta-base (dpmlm 1.3.0, ``DPMLM.__init__``);
#: for another model, ``hf-textdp calibrate --mechanism dp_mlm --public FILE`` measures them on public text
DEFAULT_CLIP = (-3.2093127, 16.304797887802124)


def check_clip(value: Any, name: str = "clip") -> tuple[float, float]:
    """``clip`` as two finite floats ``a < b`` (a list or tuple of two numbers)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 2:
        raise ParameterTypeError(f"{name} must be a pair [a, b] of numbers with a < b, got {value!r}.")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
            raise InvalidParameterError(f"{name} must be a pair [a, b] of finite numbers with a < b, got {value!r}.")
        out.append(float(v))
    if not out[0] < out[1]:
        raise InvalidParameterError(f"{name} must be a pair [a, b] with a < b (sensitivity b - a > 0), got {value!r}.")
    return out[0], out[1]


def inverse_cdf(scores: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Column k ``[n]`` with P(k) ∝ exp(scores[:, k]), from one float64 uniform per row by the inverse CDF.

    Example:

    >>> inverse_cdf(torch.tensor([[0.0, 0.0], [0.0, 50.0]], dtype=torch.float64), torch.tensor([0.4, 0.1])).tolist()
    [0, 1]
    """
    w = torch.exp(scores - scores.amax(1, keepdim=True))
    cum = torch.cumsum(w, 1)
    target = (u.to(cum.device, torch.float64) * cum[:, -1])[:, None]
    k = torch.searchsorted(cum, target.contiguous(), right=True)[:, 0]
    return k.clamp_(max=scores.shape[1] - 1)


class DpMlm(SelectionMechanism):
    """DP-MLM over the candidate set C: P[y] ∝ exp(ε·clip(logit_y, a, b) / (2(b − a))) (dp_mlm.md §2).

    Args:
        epsilon (`float`): ε per privatized position (pure DP with respect to any change of the row).
        clip (`list[float]`, *optional*, defaults to `[-3.2093127, 16.304797887802124]`): the bounds ``[a, b]``
            of the utility, from public text only (the default is the reference implementation's for
            roberta-base; ``hf-textdp calibrate --mechanism dp_mlm --public FILE`` measures another model's).
        context (`str`, *optional*, defaults to `"each"`): ``"each"`` (one forward per position, the token
            masked) or ``"once"`` (one unmasked forward per row) (dp_mlm.md §3).
        batch_tokens (`int`, *optional*, defaults to `8192`): padded ids per forward (memory only).
        clip_source (`str`, *optional*): the public file the bounds were measured on (``calibrate`` prints it);
            a run whose input is that file is refused.

    Raises:
        InvalidParameterError: a value outside the allowed range (the message names it).

    Example:

    >>> DpMlm(epsilon=10.0, clip=[-2.0, 2.0]).score_scale()
    1.25
    >>> DpMlm(epsilon=10.0, context="twice")
    Traceback (most recent call last):
    ...
    hf_textdp.errors.InvalidParameterError: context must be one of ['each', 'once'], got 'twice'.
    """

    name = "dp_mlm"
    #: the release engine passes each token's row (:class:`~hf_textdp.mechanisms.context.RowContext`)
    CONTEXTUAL: ClassVar[bool] = True
    OPTIONS = {"clip": list(DEFAULT_CLIP), "context": "each", "batch_tokens": 8192, "clip_source": None}
    CONTEXTS: ClassVar[tuple[str, ...]] = ("each", "once")
    #: factor of ε/Δ in the exponent: the exponential mechanism's 2Δ (Meisenbacher et al. 2024)
    EXPONENT_FACTOR: ClassVar[float] = 0.5

    clip: tuple[float, float]
    context: str
    batch_tokens: int
    _scorer: MaskedLMScorer | None = None

    def _validate(self) -> None:
        opts = self.options
        self.clip = check_clip(opts["clip"])
        self.context = check_choice(opts["context"], "context", self.CONTEXTS)
        self.batch_tokens = check_int(opts["batch_tokens"], "batch_tokens", minimum=1)
        if opts["clip_source"] is not None and not isinstance(opts["clip_source"], str):
            raise ParameterTypeError(
                f"clip_source must be a path (str) or None, got {type(opts['clip_source']).__name__}."
            )
        opts.update(clip=list(self.clip), batch_tokens=self.batch_tokens)

    def bind(self, scorer: MaskedLMScorer) -> None:
        """Attach the masked LM that reads each token's row (the release engine does, from ``config.model``)."""
        scorer.batch_tokens = self.batch_tokens
        self._scorer = scorer

    # ---------------------------------------------------------------- the law
    @property
    def sensitivity(self) -> float:
        """Δ = b − a: the most a clipped logit can change, whatever the row."""
        return self.clip[1] - self.clip[0]

    def score_scale(self) -> float:
        """The factor of the utility in the exponent: ε/(2Δ)."""
        return self.EXPONENT_FACTOR * self.epsilon / self.sensitivity

    def utility(self, logits: torch.Tensor) -> torch.Tensor:
        """u(y) = clip(logit_y, a, b) in float64."""
        return logits.to(torch.float64).clamp(self.clip[0], self.clip[1])

    def scores(self, logits: torch.Tensor) -> torch.Tensor:
        """The float64 exponent ε·u(y)/(2Δ) of each candidate ``[n, V]`` for logits ``[n, V]`` over C."""
        return self.utility(logits).mul_(self.score_scale())

    # ---------------------------------------------------------------- sampling
    def sample(
        self,
        space: EmbeddingSpace,
        positions: torch.Tensor,
        streams: Streams | torch.Generator,
        context: RowContext | None = None,
    ) -> torch.Tensor:
        """Output positions ``[n]`` (in ``space``'s C) for the privatized tokens described by ``context``.

        The input positions are not read beyond their number: the law depends on the row (``context``)."""
        dev = space.E.device
        positions = positions.to(dev, torch.int64)
        n = int(positions.numel())
        if n == 0 or math.isinf(self.epsilon):  # ε = ∞ only in test mode: no noise
            return positions.clone()
        if context is None or len(context) != n:
            raise InvalidParameterError(
                "mechanism 'dp_mlm' is contextual: it releases tokens with their rows (a Privatizer, "
                "privatize_dataset or the CLI), not from candidate positions alone (release_positions, collators)."
            )
        if self._scorer is None:
            raise InvalidParameterError(
                "mechanism 'dp_mlm' has no masked LM bound; build it through a Privatizer (config.model)."
            )
        st = as_streams(streams, n, dev)
        u = st.uniforms(Draw.SAMPLER, 1)[:, 0]
        cols = space.candidate_ids.to(self._scorer.device)
        out = torch.empty(n, dtype=torch.int64, device=dev)
        for tokens, logits in self._scorer.logits(context, self.context):
            t = tokens.to(dev)
            out[t] = inverse_cdf(self.scores(logits[:, cols]), u[t]).to(dev)
        return out

    # ---------------------------------------------------------------- accounting
    def claim(self, space: EmbeddingSpace) -> Claim:
        """Pure ε-DP per position against any change of the row: ε_tok = ε (dp_mlm.md §5)."""
        eps = self.epsilon

        def pair_bound(a: int, b: int) -> float:
            return eps

        return Claim(
            guarantee="dp",
            metric=None,
            epsilon=eps,
            delta=None,
            epsilon_token=eps,
            delta_token=0.0,
            certified=True,
            pair_bound=pair_bound,
        )

    def details(self, space: EmbeddingSpace) -> dict[str, Any]:
        return {
            "utility": "clipped masked-LM logit",
            "clip": list(self.clip),
            "sensitivity": self.sensitivity,
            "exponent_scale": self.score_scale(),
            "context": self.context,
        }
