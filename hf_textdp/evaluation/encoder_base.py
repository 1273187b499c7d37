"""The interface every SentEval encoder implements (:mod:`.encoders`, :mod:`.static_encoder`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..space import DEFAULT_MODEL


__all__ = ["Encoder"]


class Encoder:
    """Maps texts to a float32 feature matrix ``[n, d]``."""

    name: str = ""

    def __init__(self, model: str = DEFAULT_MODEL) -> None:
        self.model = model

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model}
