"""``hf-textdp audit``: an empirical privacy-loss audit of a mechanism against its claim."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..io.files import dumps_json
from .arguments import HelpFormatter, add_config_args, options_epilog
from .parse import config_from_args, read_seed


__all__ = ["AuditCommand"]


class AuditCommand:
    name = "audit"

    @staticmethod
    def register_subcommand(sub: Any) -> None:
        p = sub.add_parser(
            "audit",
            help="empirical privacy-loss audit of a mechanism (testing.md §3)",
            description="Estimate the privacy loss of a mechanism empirically and compare it with its claim; "
            "exit 0 when the claim holds, 1 when it does not.",
            formatter_class=HelpFormatter,
            epilog=options_epilog(),
        )
        add_config_args(p, epsilon_required=True)
        p.add_argument("--n-select", type=int, default=4000, help="draws used to pick the worst pair of tokens")
        p.add_argument("--n-estimate", type=int, default=20000, help="draws used to estimate its privacy loss")
        p.add_argument("--seed", default=None, help="seed of the audit's draws, decimal or 0x hex (default: random)")
        p.set_defaults(command=AuditCommand)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from ..io.models import load_space  # torch, transformers: not on --help's path
        from ..tools.audit import audit  # scipy.stats: imported by the commands that use it only (cold start)

        config = config_from_args(args)
        seed = read_seed(args)
        space = load_space(config.model, config.device, config.candidates)
        result = audit(config, space, n_select=args.n_select, n_estimate=args.n_estimate, seed=seed)
        sys.stdout.write(dumps_json(result.to_dict() if hasattr(result, "to_dict") else result.__dict__))
        return 0 if result.passed else 1
