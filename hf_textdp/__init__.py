"""hf-textdp: differentially private text at the subword-token level for the Hugging Face ecosystem.

The public names load on first use (PEP 562 ``__getattr__``), so ``hf-textdp`` and ``import hf_textdp``
do not pay for scipy.stats, torch or transformers until something needs them.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
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


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import hf_textdp.ray`` and ``hf_textdp.collators``, the paths the docs gave before these modules moved
    to ``run/`` and ``integrations/`` (issue 38), import the moved module under its old name too, with a
    ``FutureWarning``."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in _MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        new = _MOVED[spec.name]
        warnings.warn(f"{spec.name} moved to {new}; import it from there.", FutureWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module: types.ModuleType) -> None:  # the moved module is already executed
        pass


# old module path -> where it is now (kept for the paths the docs and examples gave)
_MOVED = {"hf_textdp.ray": "hf_textdp.run.ray", "hf_textdp.collators": "hf_textdp.integrations.collators"}
sys.meta_path.insert(0, _MovedModules())
