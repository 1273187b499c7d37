"""``hf-textdp audit``: an empirical privacy-loss audit of a mechanism against its claim."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..io.files import dumps_json
from ..utils.gc_pause import gc_frozen_imports
from ..utils.table import format_table
from .arguments import HelpFormatter, add_config_args, options_epilog
from .parse import config_from_args, read_seed


__all__ = ["AuditCommand", "format_audit"]


def format_audit(result: Any) -> str:
    """A few lines: the verdict, then per audited pair its claim, the statistic (the lower confidence bound of
    the log probability ratio), the point estimate and pass/fail at the family-wise level α."""
    verdict = "PASS" if result.passed else "FAIL"
    post = f" + {result.postprocess}" if result.postprocess else ""
    lines = [
        f"audit of {result.mechanism}{post} ({result.guarantee}): {verdict}, worst LCB/claim "
        f"{result.worst_ratio:.3g} at family-wise level α = {result.alpha:g} "
        f"({result.n_select:,} selection + {result.n_estimate:,} estimation draws per token)",
        "  a pair fails when the lower confidence bound of its largest log probability ratio exceeds the claim",
    ]
    rows = [
        (
            f"{r.w}/{r.w_prime}",
            f"{r.distance:.4g}",
            f"{r.claim:.4g}",
            f"{r.lcb:.4g}",
            f"{r.point:.4g}",
            "pass" if r.lcb <= r.claim else "FAIL",
        )
        for r in result.rows
    ]
    header = ("pair w/w'", "distance", "claim", "LCB ln ratio", "point", "result")
    lines += format_table(header, rows, right=range(1, 5), indent="  ")
    lines.append("  (raw result: --json)")
    return "\n".join(lines) + "\n"


class AuditCommand:
    name = "audit"

    @staticmethod
    def register_subcommand(sub: Any) -> None:
        p = sub.add_parser(
            "audit",
            help="empirical privacy-loss audit of a mechanism (testing.md §3)",
            description="Estimate the privacy loss of a mechanism empirically and compare it with its claim; "
            "exit 0 when the claim holds, 1 when it does not. Prints a summary per audited pair (--json: the raw "
            "result).",
            formatter_class=HelpFormatter,
            epilog=options_epilog(),
        )
        add_config_args(p, epsilon_required=True)
        p.add_argument("--n-select", type=int, default=4000, help="draws used to pick the worst pair of tokens")
        p.add_argument("--n-estimate", type=int, default=20000, help="draws used to estimate its privacy loss")
        p.add_argument("--seed", default=None, help="seed of the audit's draws, decimal or 0x hex (default: random)")
        p.add_argument("--json", action="store_true", help="print the raw JSON result instead of the summary")
        p.set_defaults(command=AuditCommand)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        with gc_frozen_imports():
            from ..io.models import load_space  # torch, transformers: not on --help's path
            from ..tools.audit import audit  # scipy.stats: imported by the commands that use it only (cold start)

        config = config_from_args(args)
        seed = read_seed(args)
        space = load_space(config.model, config.device, config.candidates)
        result = audit(config, space, n_select=args.n_select, n_estimate=args.n_estimate, seed=seed, progress=True)
        sys.stdout.write(dumps_json(result.to_dict()) if args.json else format_audit(result))
        return 0 if result.passed else 1
