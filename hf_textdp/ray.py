"""Deprecated path: ``hf_textdp.ray`` moved to :mod:`hf_textdp.run.ray` (issue 38); this module re-exports it
with a ``FutureWarning`` for code written against the old path."""

from __future__ import annotations

import warnings

from .run.ray import *  # noqa: F403
from .run.ray import __all__ as __all__


warnings.warn("hf_textdp.ray moved to hf_textdp.run.ray; import it from there.", FutureWarning, stacklevel=2)
