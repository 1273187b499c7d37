"""``hf-textdp card``: render the card of a privatized output or a results folder."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..io.files import refuse_existing_file, write_user_file
from ..utils.gc_pause import gc_frozen_imports


__all__ = ["CardCommand"]


class CardCommand:
    name = "card"

    @staticmethod
    def register_subcommand(sub: Any) -> None:
        p = sub.add_parser(
            "card",
            help="render a card for a privatized output or a recipe's results folder",
            description="Render the dataset card of a privatized output (from its privacy report) or the model-index "
            "card of a recipe's results folder.",
        )
        p.add_argument("path", help="a privatized output (with its privacy report) or a results folder")
        p.add_argument("--output", default=None, help="where to write the card (default: print it)")
        p.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
        p.set_defaults(command=CardCommand)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        with gc_frozen_imports():
            from ..integrations.cards import render_card

        refuse_existing_file(args.output, overwrite=args.overwrite, param="--output")
        card = render_card(args.path)
        if args.output:
            write_user_file(args.output, str(card), overwrite=args.overwrite, param="--output")
            print(f"wrote {args.output}")
        else:
            sys.stdout.write(str(card) + "\n")
        return 0
