"""``hf-textdp env``: the versions to paste into a bug report."""

from __future__ import annotations

import argparse
import platform
from typing import Any

from ..version import __version__


__all__ = ["EnvCommand"]


class EnvCommand:
    name = "env"

    @staticmethod
    def register_subcommand(sub: Any) -> None:
        p = sub.add_parser(
            "env",
            help="print versions for bug reports",
            description="Print the versions of hf-textdp, Python, the platform and the libraries it runs on "
            "(torch, transformers, tokenizers, datasets, ...), to paste into a bug report.",
        )
        p.set_defaults(command=EnvCommand)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        info = {"hf-textdp": __version__, "python": platform.python_version(), "platform": platform.platform()}
        for mod in ("torch", "transformers", "tokenizers", "datasets", "numpy", "scipy", "huggingface_hub"):
            try:
                info[mod] = __import__(mod).__version__
            except ImportError:
                info[mod] = "not installed"
        for k, v in info.items():
            print(f"- {k}: {v}")
        return 0
