"""``hf-textdp sample``: write the bundled sample (30 public movie reviews) to a file, from any folder."""

from __future__ import annotations

import argparse
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import InvalidParameterError, OutputExistsError
from .arguments import HelpFormatter


__all__ = ["SampleCommand", "sample_bytes"]

#: where the sample lies inside the installed package (a wheel's as a checkout's)
SAMPLE_FILE = "sample.jsonl"


def sample_bytes() -> bytes:
    """The bundled sample: 30 rows ``{"id": int, "text": str}``, the first 15 positive and the first 15 negative
    sentences of MR (Pang & Lee, 2005), public movie reviews; ``id`` is the row's index in MR."""
    return (resources.files("hf_textdp") / "data" / SAMPLE_FILE).read_bytes()


class SampleCommand:
    name = "sample"

    @staticmethod
    def register_subcommand(sub: Any) -> None:
        p = sub.add_parser(
            "sample",
            help="write the bundled sample (30 public movie reviews) to a .jsonl file",
            description="Write the sample that ships with the package (30 public movie-review sentences from "
            "MR, Pang & Lee 2005; columns id and text) to OUTPUT, to try privatize on from any folder.",
            formatter_class=HelpFormatter,
        )
        p.add_argument("output", nargs="?", default="sample.jsonl", help="a .jsonl file (default: sample.jsonl)")
        p.add_argument("--overwrite", action="store_true", help="replace an existing OUTPUT that holds other data")
        p.set_defaults(command=SampleCommand)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        output = Path(args.output).expanduser()
        if output.suffix.lower() != ".jsonl":
            raise InvalidParameterError(f"output must be a .jsonl file, got {args.output!r}.")
        data = sample_bytes()
        if output.is_file() and not args.overwrite and output.read_bytes() != data:
            raise OutputExistsError(
                f"output {args.output!r} already exists and holds other data; pass --overwrite to replace it."
            )
        if output.exists() and not output.is_file():
            raise OutputExistsError(f"output {args.output!r} exists and is not a file; choose another name.")
        output.write_bytes(data)
        rows = data.count(b"\n")
        print(f"wrote {args.output}: {rows} public movie reviews (columns id, text)")
        return 0
