"""``hf-textdp report``: the privacy report of a saved output, as a summary or JSON."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..io.files import dumps_json
from ..io.reports import privacy_report
from .arguments import HelpFormatter


__all__ = ["ReportCommand"]


class ReportCommand:
    name = "report"

    @staticmethod
    def register_subcommand(sub: Any) -> None:
        p = sub.add_parser(
            "report",
            help="print the privacy report of a saved output",
            description="Print a readable summary of a saved output's privacy report (--json: the raw report).",
            formatter_class=HelpFormatter,
        )
        p.add_argument("output", help="a privatized output file or folder (its report lies beside or inside it)")
        p.add_argument("--json", action="store_true", help="print the raw JSON report instead of the summary")
        p.set_defaults(command=ReportCommand)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        report = privacy_report(Path(args.output))
        if args.json:
            sys.stdout.write(dumps_json(report))
            return 0
        from ..integrations.cards import original_columns
        from ..integrations.report_text import format_report  # integrations: torch, not on --help's path

        kept = original_columns(args.output)  # keep_original=True: the report covers the privatized columns alone
        if kept:
            sys.stdout.write(
                f"NOT PRIVATE: {', '.join(kept)} hold{'s' if len(kept) == 1 else ''} the original input text "
                "(keep_original=True); no guarantee applies to them, nor to the rows while they are kept.\n"
            )
        sys.stdout.write(format_report(report, source=args.output))
        return 0
