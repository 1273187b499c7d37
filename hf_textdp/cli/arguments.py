"""The arguments the commands share (config, candidates, ``-o`` options) and the help they print: every option's
default, each mechanism's options, the delta each mechanism takes."""

from __future__ import annotations

import argparse
import json
import shutil
import textwrap

from .catalog import CANDIDATE_SETS, CLASS_MODES, DEFAULT_CANDIDATES, DETECTORS, MECHANISMS, POSTPROCESS, SCRIPTS


__all__ = [
    "mechanism_names",
    "postprocess_names",
    "options_epilog",
    "delta_help",
    "HelpFormatter",
    "PlainHelpFormatter",
    "HELP_WIDTH",
    "add_config_args",
    "add_candidate_args",
    "add_option_args",
    "add_sensitive_args",
    "add_user_args",
]


def mechanism_names() -> list[str]:
    """The built-in mechanisms (:mod:`hf_textdp.cli.catalog`: the help imports no mechanism module)."""
    return list(MECHANISMS)


def postprocess_names() -> list[str]:
    return list(POSTPROCESS)


def options_epilog() -> str:
    """Each registered mechanism's -o options with their defaults, and which post-processing steps apply."""
    lines = [
        "mechanism options (-o KEY=VALUE; defaults shown, allowed values in docs/mechanisms/<family>.md) and "
        "post-processing steps:"
    ]
    for name, info in MECHANISMS.items():
        opts = ", ".join(f"{k}={json.dumps(v)}" for k, v in info.options.items()) or "none"
        steps = ", ".join(info.postprocess)
        lines.append(f"  {name}: {opts}; postprocess: {steps}")
    return "\n".join(lines)


def delta_help() -> str:
    """``--delta``'s help: the mechanisms that use a delta and the default each takes when it is not given."""
    defaults: dict[str, list[str]] = {}
    for name, info in MECHANISMS.items():
        if info.uses_delta:
            value = info.default_delta
            defaults.setdefault("none" if value is None else f"{value:g}", []).append(name)
    users = ", ".join(n for names in defaults.values() for n in names)
    if len(defaults) == 1:
        default = next(iter(defaults))
    else:
        default = "; ".join(f"{d} for {', '.join(names)}" for d, names in defaults.items())
    return f"delta in (0, 1), only for mechanisms with one ({users}) (default: {default})"


#: the widest a help line gets, whatever the terminal: long lines are hard to read (argparse's width is the
#: terminal's less 2, so a 100-column terminal keeps every line it had)
HELP_WIDTH = 98


def _width() -> int:
    return min(shutil.get_terminal_size().columns - 2, HELP_WIDTH)


class PlainHelpFormatter(argparse.HelpFormatter):
    """argparse's formatter at most :data:`HELP_WIDTH` columns wide."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, width or _width())


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option's help ends with its default (argparse's ``%(default)s``), flags without one excepted; the
    description and epilog keep their line breaks, and a line wider than the help wraps under its own indent."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, width or _width())

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines = []
        for line in text.splitlines():
            own = line[: len(line) - len(line.lstrip())]  # an indented line (a list item) hangs its continuation
            lead = indent + own
            wrapped = textwrap.wrap(line.strip(), width, initial_indent=lead, subsequent_indent=lead + own * 2)
            lines.extend(wrapped or [indent])
        return "\n".join(lines)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "%(default)" in text or action.default is argparse.SUPPRESS or not action.option_strings:
            return text
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            return text + " (default: off)"
        if action.default is None:
            return text
        return text + " (default: %(default)s)"


def add_config_args(p: argparse.ArgumentParser, *, epsilon_required: bool) -> None:
    mechanisms, steps = mechanism_names(), postprocess_names()
    p.add_argument(
        "--epsilon",
        type=float,
        required=epsilon_required,
        default=None,
        help="per-token epsilon, a finite float > 0 (required"
        + (")" if epsilon_required else ", unless --config holds one)"),
    )
    p.add_argument(
        "--mechanism",
        default=None,
        metavar="NAME",
        help=f"registered mechanism, one of: {', '.join(mechanisms)} (default: madlib"
        + (")" if epsilon_required else ", or the --config's)"),
    )
    p.add_argument("--delta", type=float, default=None, help=delta_help())
    p.add_argument(
        "--model",
        default=None,
        help="hub id, local model folder or GloVe/word2vec text file "
        "(default: sentence-transformers/all-MiniLM-L6-v2)",
    )
    p.add_argument(
        "--postprocess",
        default=None,
        metavar="NAME",
        help=f"post-processing step, one of: {', '.join(steps)} (which apply depends on the mechanism) "
        "(default: nearest)",
    )
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cpu)")
    add_candidate_args(p)
    add_option_args(p)
    if not epsilon_required:
        p.add_argument("--config", help="a privatizer_config.json (or folder holding one) (default: none)")


def add_candidate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--candidates",
        default=None,
        choices=CANDIDATE_SETS,
        help=f"tokens that may be emitted (docs/mechanisms/space.md §6) (default: {DEFAULT_CANDIDATES})",
    )
    p.add_argument(
        "--candidate-scripts",
        default=None,
        metavar="SCRIPT[,SCRIPT]",
        help=f"keep only candidates written in these scripts, from: {', '.join(SCRIPTS)}; 'all' for every script "
        "(default: the scripts of the model card's language, else all)",
    )
    p.add_argument(
        "--candidate-vocab",
        default=None,
        metavar="FILE",
        help="public text or word file whose tokens are the candidates (implies --candidates public_vocab); never "
        "the input (default: none)",
    )
    p.add_argument(
        "--candidate-classes",
        default=None,
        choices=CLASS_MODES,
        help="preserve: a word-initial token is replaced by a word-initial one and a continuation piece by a "
        "continuation, each class its own metric space (docs/mechanisms/space.md §7); mix: one space over all "
        "candidates (default: preserve)",
    )


def add_option_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o",
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="mechanism/post-processing option, repeatable, e.g. -o bound=clip -o beta=0.9; VALUE is JSON when it "
        "parses (the options of each mechanism: docs/mechanisms/) (default: none)",
    )


def add_sensitive_args(p: argparse.ArgumentParser) -> None:
    """Selective privatization (docs/mechanisms/selective.md): the config's ``sensitive`` setting from flags."""
    p.add_argument(
        "--sensitive-epsilon",
        type=float,
        default=None,
        metavar="E",
        help="per-token epsilon of sensitive positions (detected or given spans); turns selective privatization on "
        "(default: none, every position at --epsilon)",
    )
    p.add_argument(
        "--sensitive-detectors",
        default=None,
        metavar="NAME[,NAME]",
        help=f"what finds sensitive spans: default (every rule, NER where an English spaCy pipeline is installed, "
        f"name and rare where wordfreq is), none (the span column alone), or a list of {', '.join(DETECTORS)}, name, "
        "rare[:ZIPF], spacy:PIPELINE, presidio (default: default)",
    )
    p.add_argument(
        "--sensitive-column",
        default=None,
        metavar="COL",
        help="column of [[start, end], ...] character spans per row, unioned with the detectors' (default: none)",
    )
    p.add_argument(
        "--others",
        default=None,
        choices=["privatize", "keep"],
        help="the other positions: privatize (at --epsilon) or keep (released unchanged, no epsilon) "
        "(default: privatize)",
    )


def add_user_args(p: argparse.ArgumentParser) -> None:
    """Per-person accounting (docs/mechanisms/users.md): the config's ``user`` setting and consistent pseudonyms."""
    p.add_argument(
        "--sensitive-consistent",
        default=None,
        choices=["row", "user"],
        help="one pseudonym per distinct sensitive string of a row or of a user, counted once (default: none)",
    )
    p.add_argument(
        "--user-column",
        default=None,
        metavar="COL",
        help="column saying whose each row is: every user's total epsilon is reported; the column is dropped from "
        "the output (default: none)",
    )
    p.add_argument(
        "--user-budget",
        type=float,
        default=None,
        metavar="B",
        help="bound on each user's total epsilon (default: none)",
    )
    p.add_argument(
        "--user-bound",
        default=None,
        choices=["scale", "rows"],
        help="meet the budget by lowering a user's per-token epsilon (scale) or by keeping few rows (rows) "
        "(default: scale)",
    )
    p.add_argument(
        "--user-max-rows",
        type=int,
        default=None,
        metavar="K",
        help="with --user-bound rows: the most rows kept of one user (default: none)",
    )
    p.add_argument("--user-keep-column", action="store_true", help="keep the user column in the output")
