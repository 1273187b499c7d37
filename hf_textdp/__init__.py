"""hf-textdp: differentially private text at the subword-token level for the Hugging Face ecosystem."""

from __future__ import annotations

from .accounting import privacy_report
from .audit import audit
from .calibrate import calibrate
from .collators import DataCollatorForInputsEmbeds, DataCollatorWithPrivatization
from .config import PrivatizerConfig
from .errors import HfTextDPError
from .pipeline import privatize_dataset
from .privatizer import Privatizer
from .tokenizer import PrivateTokenizer
from .version import __version__ as __version__


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
