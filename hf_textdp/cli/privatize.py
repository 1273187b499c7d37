"""``hf-textdp privatize``: privatize a dataset file or folder and save it with its privacy report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..errors import InvalidParameterError
from ..io.paths import report_path_for
from ..utils.gc_pause import gc_frozen_imports
from .arguments import HelpFormatter, add_config_args, add_sensitive_args, add_user_args, options_epilog
from .parse import config_from_args, read_seed


__all__ = ["PrivatizeCommand"]


class PrivatizeCommand:
    name = "privatize"

    @staticmethod
    def register_subcommand(sub: Any) -> None:
        p = sub.add_parser(
            "privatize",
            help="privatize a dataset file or folder",
            description="Privatize the text column of a dataset and save it with its privacy report.",
            formatter_class=HelpFormatter,
            epilog=options_epilog(),
        )
        p.add_argument("input", help=".jsonl/.csv/.parquet file, dataset folder, or hub id")
        p.add_argument("output", help="output file (.jsonl/.csv/.parquet) or folder (save_to_disk)")
        add_config_args(p, epsilon_required=False)
        add_sensitive_args(p)
        add_user_args(p)
        p.add_argument("--text-column", default="text", help="the column to privatize")
        p.add_argument(
            "--id-column", default=None, help="int column used as row id instead of the index (default: none)"
        )
        p.add_argument(
            "--split",
            default=None,
            help="one split of a DatasetDict; also part of the noise key (default: all splits)",
        )
        p.add_argument(
            "--seed",
            default=None,
            help="secret seed, decimal or 0x hex, >= 64 random bits (prefer --seed-file; never publish it) "
            "(default: none, fresh OS entropy per row)",
        )
        p.add_argument("--seed-file", default=None, help="file holding the secret seed (default: none)")
        p.add_argument(
            "--allow-weak-seed",
            action="store_true",
            help="accept a seed below 2**32: anyone holding the output can search such a seed and recompute the "
            "noise, so use it only for public benchmark data",
        )
        p.add_argument("--num-proc", type=int, default=None, help="worker processes for Dataset.map (default: 1)")
        p.add_argument("--batch-size", type=int, default=1000, help="rows per map batch (outputs do not depend on it)")
        p.add_argument(
            "--shard-size", type=int, default=None, help="rows per shard, the unit of --resume (default: 10000)"
        )
        p.add_argument("--streaming", action="store_true", help="stream the source and write shards as they finish")
        p.add_argument(
            "--engine", choices=["local", "ray"], default="local", help="local (datasets) or ray (Ray Data)"
        )
        p.add_argument(
            "--keep-spans",
            action="store_true",
            help="keep the --sensitive-column span column in the output (it gives each identifier's character "
            "positions in the original text; dropped by default)",
        )
        p.add_argument(
            "--keep-original",
            action="store_true",
            help="also keep the input text in TEXT_COLUMN_original (NOT private)",
        )
        p.add_argument("--overwrite", action="store_true", help="replace an existing output (or partial run)")
        p.add_argument("--resume", action="store_true", help="continue a killed run from its finished shards")
        p.set_defaults(command=PrivatizeCommand)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        with gc_frozen_imports():
            from ..run.pipeline import DEFAULT_SHARD_SIZE, save_privatized  # datasets, torch: not on --help's path

        config = config_from_args(args)
        try:
            seed = read_seed(args)
        except OSError as err:
            raise InvalidParameterError(f"--seed-file {args.seed_file!r} cannot be read ({err.strerror}).") from None
        if args.engine == "ray":  # Ray Data reads, privatizes and writes parquet; see docs/large_corpora.md
            if args.resume:
                raise InvalidParameterError(
                    "--resume is not available with --engine ray: Ray Data retries lost work within a run; rerun "
                    "with --overwrite."
                )
            from ..run.ray import privatize_ray_files  # Ray Data only with --engine ray

            report = privatize_ray_files(
                args.input,
                args.output,
                config,
                text_column=args.text_column,
                id_column=args.id_column,
                seed=seed,
                allow_weak_seed=args.allow_weak_seed,
                split=args.split or "",
                batch_size=args.batch_size,
                concurrency=args.num_proc,
                overwrite=args.overwrite,
                keep_spans=args.keep_spans,
            )
            print(summary(report, args.output, " with Ray"))
            return 0
        report = save_privatized(
            args.input,
            config,
            text_column=args.text_column,
            split=args.split,
            num_proc=args.num_proc,
            seed=seed,
            allow_weak_seed=args.allow_weak_seed,
            id_column=args.id_column,
            output_dir=args.output,
            streaming=args.streaming,
            resume=args.resume,
            overwrite=args.overwrite,
            batch_size=args.batch_size,
            shard_size=DEFAULT_SHARD_SIZE if args.shard_size is None else args.shard_size,
            keep_spans=args.keep_spans,
        )
        print(summary(report, args.output))
        return 0


_GUARANTEES = {"metric_dp": "metric DP", "dp": "DP", "umldp": "UMLDP", "none": "NO guarantee"}


def summary(report: dict[str, Any], output: str, engine: str = "") -> str:
    """What ``privatize`` prints: the counts, the three ε each labelled (the same lines as ``hf-textdp report``:
    :func:`~hf_textdp.integrations.report_text.epsilon_table`), and where the report is."""
    from ..integrations.report_text import epsilon_table

    totals = report["totals"]
    guarantee = _GUARANTEES.get(report["guarantee"], report["guarantee"])
    head = (
        f"wrote {output}{engine}: {totals['rows']} rows, {totals['dp_tokens']} privatized tokens"
        f"{_selective(totals, report)} ({report['mechanism']}, {guarantee})"
    )
    tail = f"report: {report_path_for(Path(output))} (in words: hf-textdp report {output})"
    return "\n".join([head, *epsilon_table(report), tail])


def _selective(totals: dict[str, Any], report: dict[str, Any]) -> str:
    """The summary line's detectors (selective privatization) and passthrough count."""
    sens = report.get("sensitive")
    part = ""
    if sens:
        from ..sensitive.describe import detectors_summary

        part += f"; {detectors_summary(sens)}"
    part += f", {totals.get('passthrough_tokens', 0)} passthrough"
    users = report.get("users")  # per-person accounting (users.md §6)
    if users:
        eps = users.get("user_epsilon_max")
        part += f", {users['users']} users (max user epsilon={'null' if eps is None else f'{eps:.4g}'}"
        part += f", budget={users['budget']:g}" if users.get("budget") is not None else ""
        part += f", {users['rows_dropped']} rows dropped)" if users.get("bound") == "rows" else ")"
    return part
