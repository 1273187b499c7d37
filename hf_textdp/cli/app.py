"""The ``hf-textdp`` parser over the commands (one module each) and ``main``: one line on stderr per
:class:`HfTextDPError` (exit 2), no traceback unless ``--debug``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import HfTextDPError, unexpected_error_line
from ..version import __version__
from .arguments import PlainHelpFormatter
from .attack import AttackCommand
from .audit import AuditCommand
from .bench import BenchCommand
from .calibrate import CalibrateCommand
from .card import CardCommand
from .env import EnvCommand
from .evaluate import EvaluateCommand
from .privatize import PrivatizeCommand
from .push import PushCommand
from .report import ReportCommand
from .sample import SampleCommand


__all__ = ["COMMANDS", "build_parser", "main"]

COMMANDS: list[Any] = [
    PrivatizeCommand,
    CalibrateCommand,
    ReportCommand,
    AuditCommand,
    EnvCommand,
    EvaluateCommand,
    AttackCommand,
    CardCommand,
    PushCommand,
    BenchCommand,
    SampleCommand,
]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2 (argparse's convention too)
        sys.stderr.write(f"hf-textdp: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="hf-textdp",
        description="Differentially private text at the subword-token level.",
        formatter_class=PlainHelpFormatter,
    )
    parser.add_argument("-V", "--version", action="version", version=f"hf-textdp {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=_Parser)
    for cmd in COMMANDS:
        cmd.register_subcommand(sub)
    for command in sub.choices.values():  # also after the command (SUPPRESS: an absent flag keeps the top level's)
        if command.formatter_class is argparse.HelpFormatter:  # argparse's own: as wide as the terminal
            command.formatter_class = PlainHelpFormatter
        command.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks (default: off)"
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "command", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        code: int = args.command.run(args)
        return code
    except HfTextDPError as err:
        if args.debug:
            raise
        sys.stderr.write(f"hf-textdp: error: {' '.join(str(err).split())}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("hf-textdp: interrupted\n")
        return 130
    except Exception as err:  # noqa: BLE001 - one line unless --debug
        if args.debug:
            raise
        sys.stderr.write(f"hf-textdp: error: {unexpected_error_line(err)}\n")
        return 1
