"""Progress bars for the long commands: ``datasets``' tqdm, so its switches turn them off.

``datasets.disable_progress_bars()`` / ``enable_progress_bars()`` and the environment variable
``HF_DATASETS_DISABLE_PROGRESS_BARS=1`` (which has priority) apply to these bars as to ``datasets``' own.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar


__all__ = ["progress_bar", "bars_disabled", "counted"]

T = TypeVar("T")


def bars_disabled() -> bool:
    """Whether ``datasets``' progress bars are switched off (by its API or ``HF_DATASETS_DISABLE_PROGRESS_BARS``)."""
    from datasets.utils import are_progress_bars_disabled

    return bool(are_progress_bars_disabled())


def progress_bar(
    iterable: Iterable[Any] | None = None,
    *,
    total: int | None = None,
    desc: str | None = None,
    unit: str = "it",
    enabled: bool = True,
) -> Any:
    """A tqdm bar on stderr (``datasets.utils.tqdm``); a silent one when ``enabled`` is false or bars are off."""
    from datasets.utils import tqdm

    return tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr, leave=False, disable=not enabled)


def counted(fn: Callable[..., T], bar: Any) -> Callable[..., T]:
    """``fn``, advancing ``bar`` by one at each call."""

    def call(*args: Any, **kwargs: Any) -> T:
        out = fn(*args, **kwargs)
        bar.update(1)
        return out

    return call
