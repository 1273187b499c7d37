"""``hf-textdp attack``: what an informed adversary recovers from a release (the eval extra)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..errors import InvalidParameterError
from ..io.files import dumps_json, refuse_existing_file, write_user_file
from ..utils.gc_pause import gc_frozen_imports
from .arguments import HelpFormatter, add_config_args, options_epilog
from .parse import config_from_args


__all__ = ["AttackCommand"]


class AttackCommand:
    name = "attack"

    @staticmethod
    def register_subcommand(sub: Any) -> None:
        p = sub.add_parser(
            "attack",
            help="measure what an informed adversary recovers from a release (identity, Bayes, contextual)",
            description="Privatize --private with a mechanism and attack the release with an adversary who knows the "
            "mechanism, its parameters, the embedding matrix and --public text, but not the key (docs/attacks.md). "
            "Prints top-1/top-5 recovery with 95% row-bootstrap intervals. Or run an attack recipe with --recipe.",
            formatter_class=HelpFormatter,
            epilog=options_epilog(),
        )
        p.add_argument("--recipe", default=None, help="run an attack recipe (recipes/attacks_*.yaml) instead")
        p.add_argument(
            "--output", default=None, help="with --recipe: results root (default results); else: write the JSON record"
        )
        p.add_argument("--no-resume", action="store_true", help="with --recipe: recompute records that exist")
        p.add_argument(
            "--private", default=None, help="the data to release and attack: .txt (a text per line) or .jsonl"
        )
        p.add_argument("--public", nargs="+", default=None, help="the adversary's public text files (never --private)")
        add_config_args(p, epsilon_required=False)
        p.add_argument("--max-rows", type=int, default=None, help="attack the first N private rows (default: all)")
        p.add_argument("--no-contextual", action="store_true", help="skip the contextual attack (faster)")
        p.add_argument("--inversion", action="store_true", help="also train and run the inversion attack (slow)")
        p.add_argument("--overwrite", action="store_true", help="without --recipe: replace an existing --output file")
        p.set_defaults(command=AttackCommand)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        with gc_frozen_imports():
            from ..evaluation.attacks.cli import attack_files, format_record  # the eval extra's layer
            from ..evaluation.attacks.recipe import run_attack_recipe

        if args.recipe is not None:
            folder = run_attack_recipe(
                args.recipe,
                args.output or "results",
                resume=not args.no_resume,
                progress=lambda m: print(m, flush=True),
            )
            print(f"summary {folder / 'README.md'}")
            return 0
        if args.private is None or not args.public:
            raise InvalidParameterError("attack: give --private and --public (or --recipe).")
        refuse_existing_file(args.output, overwrite=args.overwrite, param="--output")  # before the attack runs
        record = attack_files(
            config_from_args(args),
            Path(args.private),
            [Path(p) for p in args.public],
            max_rows=args.max_rows,
            contextual=not args.no_contextual,
            inversion=args.inversion,
            progress=lambda m: print(m, file=sys.stderr, flush=True),
        )
        print(format_record(record))
        if args.output:
            write_user_file(args.output, dumps_json(record), overwrite=args.overwrite, param="--output")
            print(f"wrote {args.output}")
        return 0
