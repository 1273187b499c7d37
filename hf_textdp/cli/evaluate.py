"""``hf-textdp evaluate``: run SentEval recipes (the eval extra)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..utils.gc_pause import gc_frozen_imports


__all__ = ["EvaluateCommand"]


class EvaluateCommand:
    name = "evaluate"

    @staticmethod
    def register_subcommand(sub: Any) -> None:
        p = sub.add_parser(
            "evaluate",
            help="run a SentEval recipe: privatize, encode, classify, plot",
            description="Run SentEval recipes (recipes/*.yaml): privatize each task's text, encode it, classify, "
            "and write one result JSON per cell, the plots and a summary.",
        )
        p.add_argument("recipe", nargs="+", help="one or more recipes/*.yaml files")
        p.add_argument(
            "--output", default=None, help="results root; each recipe writes <output>/<its folder> (default results)"
        )
        p.add_argument("--no-resume", action="store_true", help="recompute results that already exist")
        p.add_argument(
            "--jobs", type=int, default=1, help="worker processes sharing the units of all the recipes (default 1)"
        )
        p.add_argument(
            "--device",
            default="cpu",
            help="where the privatizers run; for whole-model fine-tune recipes, where the model trains and is "
            "scored (their privatizers stay on the CPU): cpu, cuda or cuda:N (default cpu)",
        )
        p.set_defaults(command=EvaluateCommand)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        with gc_frozen_imports():
            from ..evaluation.recipe import run_recipes  # the eval extra's layer; importing it costs ~2 s (evaluate)

        root = Path(args.output or "results")
        done = run_recipes(
            args.recipe,
            root,
            jobs=args.jobs,
            device=args.device,
            resume=not args.no_resume,
            progress=lambda m: print(m, flush=True),
        )
        try:  # the recipes draw their plots with matplotlib (the eval extra); without it they warned and drew none
            import matplotlib  # noqa: F401

            plots = " and plots"
        except ImportError:
            plots = " (no plots: pip install 'hf-textdp[eval]' for matplotlib)"
        for folder, written in done:
            print(f"wrote {len(written)} result files{plots} in {folder}")
        print(f"summary {root / 'README.md'}")
        return 0
