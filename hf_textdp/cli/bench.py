"""``hf-textdp bench``: throughput against this machine's product bounds."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..io.files import dumps_json, refuse_existing_file, write_user_file
from ..utils.gc_pause import gc_frozen_imports
from .catalog import DEFAULT_MODEL


__all__ = ["BenchCommand"]


class BenchCommand:
    name = "bench"

    @staticmethod
    def register_subcommand(sub: Any) -> None:
        p = sub.add_parser(
            "bench",
            help="throughput of privatize() against this machine's fp32, bf16 and int8 product bounds",
            description="Measure privatize()'s tokens/s per mechanism against the fp32, bf16 and int8 matrix-product "
            "bounds of this machine, measured in the same run.",
        )
        p.add_argument("--model", default=None, help="hub id, model folder or vector file (default: all-MiniLM-L6-v2)")
        p.add_argument(
            "--mechanism",
            action="append",
            default=None,
            metavar="MECH[/POSTPROCESS]",
            help="a case to run, repeatable (default: the standard set)",
        )
        p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
        p.add_argument(
            "--kernel-only",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="also time the device part alone, without tokenizing or decoding (default: on a GPU)",
        )
        p.add_argument(
            "--text",
            default=None,
            help=".jsonl (field 'text') or text file (default: SentEval MR; an error when it is missing); "
            "'sample' for the packaged 30-row sample",
        )
        p.add_argument(  # default: sized to the machine (tools.bench.run.sized_rows)
            "--rows",
            type=int,
            default=None,
            help="rows of the text to privatize per case (default: sized to a pass of about 6 s)",
        )
        p.add_argument("--json", default=None, metavar="FILE", help="also write the results as JSON")
        p.add_argument("--overwrite", action="store_true", help="replace an existing --json file")
        p.add_argument("--epsilon", type=float, default=10.0, help="privacy parameter per token (default 10)")
        p.add_argument(
            "--batch-size", type=int, default=1000, help="rows per privatize() call, as datasets.map's (default 1000)"
        )
        p.add_argument("--repeats", type=int, default=3, help="timed passes per case (the best counts; default 3)")
        p.add_argument("--one-word-rows", action="store_true", help="one whitespace word per row")
        p.add_argument("--no-cold-start", action="store_true", help="skip the cold CLI run on 30 rows")
        p.add_argument("--memory", action="store_true", help="also privatize the whole text with the CLI (peak RSS)")
        p.set_defaults(command=BenchCommand)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        with gc_frozen_imports():
            from ..tools.bench import format_table, run_bench

        refuse_existing_file(args.json, overwrite=args.overwrite, param="--json")  # before the benchmark runs
        report = run_bench(
            model=args.model or DEFAULT_MODEL,
            mechanisms=args.mechanism,
            device=args.device,
            text=args.text,
            rows=args.rows,
            epsilon=args.epsilon,
            batch_size=args.batch_size,
            repeats=args.repeats,
            one_word=args.one_word_rows,
            cold_start=not args.no_cold_start,
            memory_run=args.memory,
            kernel_only=args.kernel_only,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
        print(format_table(report))
        if args.json:
            write_user_file(args.json, dumps_json(report.to_dict()), overwrite=args.overwrite, param="--json")
        return 0
