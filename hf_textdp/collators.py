"""Deprecated path: ``hf_textdp.collators`` moved to :mod:`hf_textdp.integrations.collators` (issue 38); this
module re-exports it with a ``FutureWarning`` for code written against the old path."""

from __future__ import annotations

import warnings

from .integrations.collators import *  # noqa: F403
from .integrations.collators import __all__ as __all__


warnings.warn(
    "hf_textdp.collators moved to hf_textdp.integrations.collators; import it from there.", FutureWarning, stacklevel=2
)
