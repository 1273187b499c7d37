"""``hf-textdp push``: publish an output, a config or results to the Hub."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..utils.gc_pause import gc_frozen_imports


__all__ = ["PushCommand"]


class PushCommand:
    name = "push"

    @staticmethod
    def register_subcommand(sub: Any) -> None:
        p = sub.add_parser(
            "push",
            help="publish a privatized output, a config or recipe results to the Hub",
            description="Publish a privatized output (with its card and report), a privatizer config or a recipe's "
            "results to the Hugging Face Hub.",
        )
        p.add_argument("path", help="privatized output, privatizer_config.json (or its folder), or results folder")
        p.add_argument("repo_id", help="the Hub repository to create or update, as namespace/name")
        p.add_argument("--private", action="store_true", help="create the repository private (default: public)")
        p.add_argument(
            "--token",
            default=None,
            help="Hub token; better left out: the token then comes from HF_TOKEN or `hf auth login`, as "
            "huggingface_hub finds it (a token on the command line lands in the shell history)",
        )
        p.add_argument(
            "--allow-original",
            action="store_true",
            help="publish a dataset that holds *_original columns (the input text, NOT private; refused "
            "otherwise); its card then says the dataset is not private",
        )
        p.set_defaults(command=PushCommand)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        with gc_frozen_imports():
            from ..integrations.hub import push_to_hub

        if args.token is not None:
            print(
                "hf-textdp: warning: a token given with --token lands in the shell history; set HF_TOKEN or run "
                "`hf auth login` instead.",
                file=sys.stderr,
            )
        url = push_to_hub(
            args.path, args.repo_id, private=args.private, token=args.token, allow_original=args.allow_original
        )
        print(f"pushed {args.path} to {url}")
        return 0
