"""hf-textdp: differentially private text at the subword-token level for the Hugging Face ecosystem.

The public names load on first use (PEP 562 ``__getattr__``), so ``hf-textdp`` and ``import hf_textdp``
do not pay for scipy.stats, torch or transformers until something needs them.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from .version import __version__ as __version__


if TYPE_CHECKING:
    from .audit import audit
    from .calibrate import calibrate
    from .collators import DataCollatorForInputsEmbeds, DataCollatorWithPrivatization
    from .config import PrivatizerConfig
    from .errors import HfTextDPError
    from .io.reports import privacy_report
    from .pipeline import privatize_dataset
    from .privatizer import Privatizer
    from .tokenizer import PrivateTokenizer


__all__ = [
    "PrivatizerConfig",
    "Privatizer",
    "privatize_dataset",
    "privacy_report",
    "calibrate",
    "audit",
    "PrivateTokenizer",
    "DataCollatorWithPrivatization",
    "DataCollatorForInputsEmbeds",
    "HfTextDPError",
]

# public name -> the module that defines it
_LAZY = {
    "PrivatizerConfig": "config",
    "Privatizer": "privatizer",
    "privatize_dataset": "pipeline",
    "privacy_report": "io.reports",
    "calibrate": "calibrate",
    "audit": "audit",
    "PrivateTokenizer": "tokenizer",
    "DataCollatorWithPrivatization": "collators",
    "DataCollatorForInputsEmbeds": "collators",
    "HfTextDPError": "errors",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """``hf_textdp.audit`` and ``hf_textdp.calibrate`` are functions, as they were when this file imported
    them eagerly: importing the submodule of the same name would otherwise bind the module here."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("audit", "calibrate") and isinstance(value, types.ModuleType):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
