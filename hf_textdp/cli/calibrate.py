"""``hf-textdp calibrate``: replacement rates, and the epsilon for a target rate, from the public matrix."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..errors import InvalidParameterError, MissingExtraError
from ..io.files import dumps_json
from ..utils.gc_pause import gc_frozen_imports
from .arguments import (
    HelpFormatter,
    add_candidate_args,
    delta_help,
    mechanism_names,
    options_epilog,
    postprocess_names,
)
from .catalog import DEFAULT_CANDIDATES, DEFAULT_MODEL
from .parse import candidates_from_args, parse_options


__all__ = ["CalibrateCommand"]


class CalibrateCommand:
    name = "calibrate"

    @staticmethod
    def register_subcommand(sub: Any) -> None:
        p = sub.add_parser(
            "calibrate",
            help="find epsilon for a target replacement rate (public matrix only)",
            description="Estimate replacement rates, and the epsilon for a target rate, from the public embedding "
            "matrix alone (no private data). Prints a summary (--json: the raw result).",
            formatter_class=HelpFormatter,
            epilog=options_epilog(),
        )
        p.add_argument(
            "--target-rate", type=float, default=None, help="replacement rate in (0, 1) to solve for (default: none)"
        )
        p.add_argument(
            "--mechanism",
            default="madlib",
            metavar="NAME",
            help=f"registered mechanism, one of: {', '.join(mechanism_names())}",
        )
        p.add_argument(
            "--model",
            default=None,
            help="hub id, local model folder or vector file (default: sentence-transformers/all-MiniLM-L6-v2)",
        )
        p.add_argument(
            "--postprocess",
            default=None,
            metavar="NAME",
            help=f"post-processing step, one of: {', '.join(postprocess_names())} (default: nearest)",
        )
        p.add_argument("--delta", type=float, default=None, help=delta_help())
        p.add_argument(
            "-o", "--option", action="append", metavar="KEY=VALUE", help="mechanism option, repeatable (default: none)"
        )
        add_candidate_args(p)
        p.add_argument(
            "--epsilons",
            default=None,
            help="comma-separated epsilons to tabulate (default: only the solved one; with --plot, a grid around it)",
        )
        p.add_argument(
            "--public",
            default=None,
            metavar="FILE",
            help="dp_mlm only: a public text file (one line per row) to measure the clip bounds on, never the text "
            "to be privatized (default: none)",
        )
        p.add_argument("--json", action="store_true", help="print the raw JSON result instead of the summary")
        p.add_argument(
            "--plot",
            default=None,
            metavar="FILE",
            help="also draw the replacement rate against epsilon into FILE (.png/.pdf/.svg; needs matplotlib: "
            "pip install 'hf-textdp[eval]') (default: none)",
        )
        p.set_defaults(command=CalibrateCommand)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        with gc_frozen_imports():
            from ..config import PrivatizerConfig  # torch, transformers: not on --help's path
            from ..tools.calibrate import calibrate
            from ..tools.calibration_report import format_calibration, plot_calibration

        if args.plot is not None:  # fail before the work when matplotlib is missing or cannot write the format
            try:
                from matplotlib.backend_bases import FigureCanvasBase
            except ImportError as err:
                raise MissingExtraError("--plot needs matplotlib: pip install 'hf-textdp[eval]'.") from err
            formats = sorted(FigureCanvasBase.get_supported_filetypes())
            if Path(args.plot).suffix[1:].lower() not in formats:
                raise InvalidParameterError(
                    f"--plot must end in a format matplotlib writes ({', '.join('.' + f for f in formats)}), "
                    f"got {args.plot!r}."
                )
        if args.mechanism == "dp_mlm" or args.public is not None:
            return _dp_mlm_bounds(args)
        kwargs: dict[str, Any] = {"target_rate": args.target_rate}
        candidates = candidates_from_args(args, DEFAULT_CANDIDATES)
        if args.postprocess is not None or args.delta is not None or candidates != DEFAULT_CANDIDATES:
            kwargs["config"] = PrivatizerConfig(
                mechanism=args.mechanism,
                epsilon=1.0,  # ignored: calibrate evaluates the epsilons it is asked for
                delta=args.delta,
                model=args.model or DEFAULT_MODEL,
                postprocess=args.postprocess or "nearest",
                options=parse_options(args.option),
                candidates=candidates,
            )
        else:
            kwargs.update(
                mechanism=args.mechanism, model=args.model or DEFAULT_MODEL, options=parse_options(args.option)
            )
        if args.epsilons:
            try:
                kwargs["epsilons"] = [float(x) for x in args.epsilons.split(",")]
            except ValueError:
                raise InvalidParameterError(
                    f"--epsilons must be comma-separated numbers, got {args.epsilons!r}."
                ) from None
        kwargs["progress"] = True
        result = calibrate(**kwargs)
        if args.plot is not None and not args.epsilons and result.epsilon is not None:
            grid = [result.epsilon * f for f in (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0)]
            result = calibrate(**{**kwargs, "epsilons": grid})
        sys.stdout.write(dumps_json(result.to_dict()) if args.json else format_calibration(result))
        if args.plot is not None:
            plot_calibration(result, args.plot)
            if not args.json:
                print(f"wrote {args.plot}")
        return 0


def _dp_mlm_bounds(args: argparse.Namespace) -> int:
    """``calibrate --mechanism dp_mlm --public FILE``: the clip bounds [a, b] of the model's logits on public text."""
    from ..config import PrivatizerConfig
    from ..tools.mlm_bounds import mlm_clip_bounds

    if args.mechanism != "dp_mlm":
        raise InvalidParameterError(f"--public is for --mechanism dp_mlm only, got --mechanism {args.mechanism}.")
    if args.public is None:
        raise InvalidParameterError(
            "--mechanism dp_mlm needs --public FILE: public text to measure the clip bounds on."
        )
    path = Path(args.public)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidParameterError(
            f"--public: cannot read {args.public!r} as UTF-8 text ({type(err).__name__})."
        ) from None
    config = PrivatizerConfig(
        mechanism="dp_mlm",
        epsilon=1.0,  # not used: the bounds do not depend on epsilon
        model=args.model or DEFAULT_MODEL,
        options=parse_options(args.option),
        candidates=candidates_from_args(args, DEFAULT_CANDIDATES),
    )
    result = mlm_clip_bounds(config, lines)
    result["clip_source"] = str(path)
    if args.json:
        sys.stdout.write(dumps_json(result))
    else:
        a, b = result["clip"]
        print(
            f"dp_mlm clip bounds of {config.model} on {result['positions']} positions of {result['lines']} public "
            f"lines ({result['tail']:g} clipped on each side): a = {a:.6g}, b = {b:.6g}, sensitivity {b - a:.6g}"
        )
        print(f"use: -o 'clip=[{a!r}, {b!r}]' -o clip_source={path}")
    return 0
