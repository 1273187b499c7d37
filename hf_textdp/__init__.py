"""hf-textdp: differentially private text at the subword-token level for the Hugging Face ecosystem.

The public names load on first use (PEP 562 ``__getattr__``), so ``hf-textdp`` and ``import hf_textdp``
do not pay for scipy.stats, torch or transformers until something needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .version import __version__ as __version__


if TYPE_CHECKING:
    from .config import PrivatizerConfig
    from .errors import HfTextDPError
    from .integrations.collators import DataCollatorForInputsEmbeds, DataCollatorWithPrivatization
    from .integrations.tokenizer import PrivateTokenizer
    from .io.reports import privacy_report
    from .privatizer import Privatizer
    from .run.pipeline import privatize_dataset
    from .tools.audit import audit
    from .tools.calibrate import calibrate


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
    "privatize_dataset": "run.pipeline",
    "privacy_report": "io.reports",
    "calibrate": "tools.calibrate",
    "audit": "tools.audit",
    "PrivateTokenizer": "integrations.tokenizer",
    "DataCollatorWithPrivatization": "integrations.collators",
    "DataCollatorForInputsEmbeds": "integrations.collators",
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
