"""``hf-textdp``: the command-line front end. It holds no logic: it parses arguments,
calls the public API, and prints one line per :class:`HfTextDPError` (exit 2), no traceback
unless ``--debug``."""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .accounting import format_report
from .candidates import CANDIDATE_SETS, CLASS_MODES, DEFAULT_CANDIDATES, SCRIPTS, parse_candidates
from .config import PrivatizerConfig
from .errors import HfTextDPError, InvalidParameterError, MissingExtraError, OutputExistsError
from .io.files import dumps_json
from .io.models import load_space
from .io.paths import report_path_for
from .io.reports import privacy_report
from .mechanisms import get_mechanism_class, list_mechanisms
from .pipeline import DEFAULT_SHARD_SIZE, privatize_dataset
from .postprocess import list_postprocess
from .space import DEFAULT_MODEL
from .version import __version__


__all__ = ["main"]


def _parse_value(text: str) -> Any:
    """``-o KEY=VALUE``: VALUE is JSON when it parses (numbers, true/false, null, lists), else a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _options(pairs: Sequence[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in pairs or []:
        if "=" not in item:
            raise InvalidParameterError(f"-o/--option expects KEY=VALUE, got {item!r}.")
        key, value = item.split("=", 1)
        out[key.strip()] = _parse_value(value)
    return out


def _read_seed(args: argparse.Namespace) -> int | None:
    """``--seed`` or ``--seed-file`` (the commands without ``--seed-file`` too), decimal or 0x hex; never echoed."""
    seed_file = getattr(args, "seed_file", None)
    if args.seed is not None and seed_file is not None:
        raise InvalidParameterError("--seed and --seed-file are mutually exclusive; give one of them.")
    if seed_file is not None:
        text = Path(seed_file).read_text().strip()
        try:
            return int(text, 0)
        except ValueError:
            raise InvalidParameterError("--seed-file must hold one integer (decimal or 0x hex).") from None
    if args.seed is not None:
        try:
            return int(args.seed, 0)
        except ValueError:
            raise InvalidParameterError("--seed must be an integer (decimal or 0x hex).") from None
    return None


def _mechanism_names() -> list[str]:
    return list_mechanisms()


def _postprocess_names() -> list[str]:
    return list_postprocess()


def _options_epilog() -> str:
    """Each registered mechanism's -o options with their defaults, and which post-processing steps apply."""
    lines = [
        "mechanism options (-o KEY=VALUE; defaults shown, allowed values in docs/mechanisms/<family>.md) and "
        "post-processing steps:"
    ]
    for name in _mechanism_names():
        cls = get_mechanism_class(name)
        opts = ", ".join(f"{k}={json.dumps(v)}" for k, v in getattr(cls, "OPTIONS", {}).items()) or "none"
        steps = ", ".join(getattr(cls, "POSTPROCESS", ()))
        lines.append(f"  {name}: {opts}; postprocess: {steps}")
    return "\n".join(lines)


def _delta_help() -> str:
    """``--delta``'s help: the mechanisms that use a delta and the default each takes when it is not given."""
    defaults: dict[str, list[str]] = {}
    for name in _mechanism_names():
        cls = get_mechanism_class(name)
        if getattr(cls, "USES_DELTA", False):
            value = getattr(cls, "DEFAULT_DELTA", None)
            defaults.setdefault("none" if value is None else f"{value:g}", []).append(name)
    users = ", ".join(n for names in defaults.values() for n in names)
    if len(defaults) == 1:
        default = next(iter(defaults))
    else:
        default = "; ".join(f"{d} for {', '.join(names)}" for d, names in defaults.items())
    return f"delta in (0, 1), only for mechanisms with one ({users}) (default: {default})"


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option's help ends with its default (argparse's ``%(default)s``), flags without one excepted."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "%(default)" in text or action.default is argparse.SUPPRESS or not action.option_strings:
            return text
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            return text + " (default: off)"
        if action.default is None:
            return text
        return text + " (default: %(default)s)"


def _config_from_args(args: argparse.Namespace) -> Any:
    base: dict[str, Any] = {}
    if getattr(args, "config", None):
        base = PrivatizerConfig.from_pretrained(args.config).to_dict()
    for key in ("mechanism", "model", "postprocess", "delta", "device"):
        value = getattr(args, key, None)
        if value is not None:
            base[key] = value
    if getattr(args, "epsilon", None) is not None:
        base["epsilon"] = args.epsilon
    if "epsilon" not in base:
        raise InvalidParameterError("--epsilon is required (or a --config that holds one).")
    opts = dict(base.get("options") or {})
    opts.update(_options(getattr(args, "option", None)))
    base["options"] = opts
    if getattr(args, "keep_original", False):
        base["keep_original"] = True
    base["candidates"] = _candidates_from_args(args, base.get("candidates", DEFAULT_CANDIDATES))
    return PrivatizerConfig(**base)


def _candidates_from_args(args: argparse.Namespace, base: Any) -> Any:
    """``--candidates``, ``--candidate-scripts`` and ``--candidate-vocab`` over the config's setting."""
    keys = ("candidates", "candidate_scripts", "candidate_vocab", "candidate_classes")
    cand_set, scripts, vocab, classes = (getattr(args, k, None) for k in keys)
    if cand_set is None and scripts is None and vocab is None and classes is None:
        return base
    spec = parse_candidates(base)
    return {
        "set": cand_set or ("public_vocab" if vocab is not None else spec.set),
        "scripts": [s.strip() for s in scripts.split(",") if s.strip()] if scripts is not None else spec.scripts,
        "vocab": vocab if vocab is not None else spec.vocab,
        "classes": classes or spec.classes,
    }


# --------------------------------------------------------------------------- subcommands
class PrivatizeCommand:
    name = "privatize"

    @staticmethod
    def register_subcommand(sub: Any) -> None:
        p = sub.add_parser(
            "privatize",
            help="privatize a dataset file or folder",
            description="Privatize the text column of a dataset and save it with its privacy report.",
            formatter_class=_HelpFormatter,
            epilog=_options_epilog(),
        )
        p.add_argument("input", help=".jsonl/.csv/.parquet file, dataset folder, or hub id")
        p.add_argument("output", help="output file (.jsonl/.csv/.parquet) or folder (save_to_disk)")
        _add_config_args(p, epsilon_required=False)
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
            "--keep-original",
            action="store_true",
            help="also keep the input text in TEXT_COLUMN_original (NOT private)",
        )
        p.add_argument("--overwrite", action="store_true", help="replace an existing output (or partial run)")
        p.add_argument("--resume", action="store_true", help="continue a killed run from its finished shards")
        p.set_defaults(command=PrivatizeCommand)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        config = _config_from_args(args)
        try:
            seed = _read_seed(args)
        except OSError as err:
            raise InvalidParameterError(f"--seed-file {args.seed_file!r} cannot be read ({err.strerror}).") from None
        if args.engine == "ray":  # Ray Data reads, privatizes and writes parquet; see docs/large_corpora.md
            if args.resume:
                raise InvalidParameterError(
                    "--resume is not available with --engine ray: Ray Data retries lost work within a run; rerun "
                    "with --overwrite."
                )
            from .ray import privatize_ray_files  # Ray Data only with --engine ray

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
            )
            totals = report["totals"]
            print(
                f"wrote {args.output} with Ray: {totals['rows']} rows, {totals['dp_tokens']} privatized tokens "
                f"({report['mechanism']}, epsilon={report['epsilon']:g} per token, guarantee={report['guarantee']}); "
                f"report: {report_path_for(Path(args.output))}"
            )
            return 0
        privatize_dataset(
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
        )
        report = json.loads(report_path_for(Path(args.output)).read_text(encoding="utf-8"))
        totals = report["totals"]
        eps_row = totals["max_row_dp_epsilon"]
        print(
            f"wrote {args.output}: {totals['rows']} rows, {totals['dp_tokens']} privatized tokens "
            f"({report['mechanism']}, epsilon={report['epsilon']:g} per token, guarantee={report['guarantee']}, "
            f"max row dp_epsilon={'null' if eps_row is None else f'{eps_row:.4g}'}); report: "
            f"{report_path_for(Path(args.output))}"
        )
        return 0


class ReportCommand:
    name = "report"

    @staticmethod
    def register_subcommand(sub: Any) -> None:
        p = sub.add_parser(
            "report",
            help="print the privacy report of a saved output",
            description="Print a readable summary of a saved output's privacy report (--json: the raw report).",
            formatter_class=_HelpFormatter,
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
        from .cards import original_columns

        kept = original_columns(args.output)  # keep_original=True: the report covers the privatized columns alone
        if kept:
            sys.stdout.write(
                f"NOT PRIVATE: {', '.join(kept)} hold{'s' if len(kept) == 1 else ''} the original input text "
                "(keep_original=True); no guarantee applies to them, nor to the rows while they are kept.\n"
            )
        sys.stdout.write(format_report(report, source=args.output))
        return 0


class CalibrateCommand:
    name = "calibrate"

    @staticmethod
    def register_subcommand(sub: Any) -> None:
        p = sub.add_parser(
            "calibrate",
            help="find epsilon for a target replacement rate (public matrix only)",
            description="Estimate replacement rates, and the epsilon for a target rate, from the public embedding "
            "matrix alone (no private data). Prints a summary (--json: the raw result).",
            formatter_class=_HelpFormatter,
            epilog=_options_epilog(),
        )
        p.add_argument(
            "--target-rate", type=float, default=None, help="replacement rate in (0, 1) to solve for (default: none)"
        )
        p.add_argument(
            "--mechanism",
            default="madlib",
            metavar="NAME",
            help=f"registered mechanism, one of: {', '.join(_mechanism_names())}",
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
            help=f"post-processing step, one of: {', '.join(_postprocess_names())} (default: nearest)",
        )
        p.add_argument("--delta", type=float, default=None, help=_delta_help())
        p.add_argument(
            "-o", "--option", action="append", metavar="KEY=VALUE", help="mechanism option, repeatable (default: none)"
        )
        _add_candidate_args(p)
        p.add_argument(
            "--epsilons",
            default=None,
            help="comma-separated epsilons to tabulate (default: only the solved one; with --plot, a grid around it)",
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
        from .calibrate import calibrate, format_calibration, plot_calibration

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
        kwargs: dict[str, Any] = {"target_rate": args.target_rate}
        candidates = _candidates_from_args(args, DEFAULT_CANDIDATES)
        if args.postprocess is not None or args.delta is not None or candidates != DEFAULT_CANDIDATES:
            kwargs["config"] = PrivatizerConfig(
                mechanism=args.mechanism,
                epsilon=1.0,  # ignored: calibrate evaluates the epsilons it is asked for
                delta=args.delta,
                model=args.model or DEFAULT_MODEL,
                postprocess=args.postprocess or "nearest",
                options=_options(args.option),
                candidates=candidates,
            )
        else:
            kwargs.update(mechanism=args.mechanism, model=args.model or DEFAULT_MODEL, options=_options(args.option))
        if args.epsilons:
            try:
                kwargs["epsilons"] = [float(x) for x in args.epsilons.split(",")]
            except ValueError:
                raise InvalidParameterError(
                    f"--epsilons must be comma-separated numbers, got {args.epsilons!r}."
                ) from None
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


class AuditCommand:
    name = "audit"

    @staticmethod
    def register_subcommand(sub: Any) -> None:
        p = sub.add_parser(
            "audit",
            help="empirical privacy-loss audit of a mechanism (testing.md §3)",
            description="Estimate the privacy loss of a mechanism empirically and compare it with its claim; "
            "exit 0 when the claim holds, 1 when it does not.",
            formatter_class=_HelpFormatter,
            epilog=_options_epilog(),
        )
        _add_config_args(p, epsilon_required=True)
        p.add_argument("--n-select", type=int, default=4000, help="draws used to pick the worst pair of tokens")
        p.add_argument("--n-estimate", type=int, default=20000, help="draws used to estimate its privacy loss")
        p.add_argument("--seed", default=None, help="seed of the audit's draws, decimal or 0x hex (default: random)")
        p.set_defaults(command=AuditCommand)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from .audit import audit  # scipy.stats: imported by the commands that use it only (cold start)

        config = _config_from_args(args)
        seed = _read_seed(args)
        space = load_space(config.model, config.device, config.candidates)
        result = audit(config, space, n_select=args.n_select, n_estimate=args.n_estimate, seed=seed)
        sys.stdout.write(dumps_json(result.to_dict() if hasattr(result, "to_dict") else result.__dict__))
        return 0 if result.passed else 1


class EnvCommand:
    name = "env"

    @staticmethod
    def register_subcommand(sub: Any) -> None:
        p = sub.add_parser(
            "env",
            help="print versions for bug reports",
            description="Print the versions of hf-textdp, Python, the platform and the libraries it runs on "
            "(torch, transformers, tokenizers, datasets, ...), to paste into a bug report.",
        )
        p.set_defaults(command=EnvCommand)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        info = {"hf-textdp": __version__, "python": platform.python_version(), "platform": platform.platform()}
        for mod in ("torch", "transformers", "tokenizers", "datasets", "numpy", "scipy", "huggingface_hub"):
            try:
                info[mod] = __import__(mod).__version__
            except ImportError:
                info[mod] = "not installed"
        for k, v in info.items():
            print(f"- {k}: {v}")
        return 0


def _add_config_args(p: argparse.ArgumentParser, *, epsilon_required: bool) -> None:
    mechanisms, steps = _mechanism_names(), _postprocess_names()
    p.add_argument(
        "--epsilon",
        type=float,
        required=epsilon_required,
        default=None,
        help="per-token epsilon, a finite float > 0 (required"
        + (")" if epsilon_required else ", unless --config holds one)"),
    )
    p.add_argument(
        "--mechanism",
        default=None,
        metavar="NAME",
        help=f"registered mechanism, one of: {', '.join(mechanisms)} (default: madlib"
        + (")" if epsilon_required else ", or the --config's)"),
    )
    p.add_argument("--delta", type=float, default=None, help=_delta_help())
    p.add_argument(
        "--model",
        default=None,
        help="hub id, local model folder or GloVe/word2vec text file "
        "(default: sentence-transformers/all-MiniLM-L6-v2)",
    )
    p.add_argument(
        "--postprocess",
        default=None,
        metavar="NAME",
        help=f"post-processing step, one of: {', '.join(steps)} (which apply depends on the mechanism) "
        "(default: nearest)",
    )
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cpu)")
    _add_candidate_args(p)
    _add_option_args(p)
    if not epsilon_required:
        p.add_argument("--config", help="a privatizer_config.json (or folder holding one) (default: none)")


def _add_candidate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--candidates",
        default=None,
        choices=CANDIDATE_SETS,
        help=f"tokens that may be emitted (docs/mechanisms/space.md §6) (default: {DEFAULT_CANDIDATES})",
    )
    p.add_argument(
        "--candidate-scripts",
        default=None,
        metavar="SCRIPT[,SCRIPT]",
        help=f"keep only candidates written in these scripts, from: {', '.join(SCRIPTS)}; 'all' for every script "
        "(default: the scripts of the model card's language, else all)",
    )
    p.add_argument(
        "--candidate-vocab",
        default=None,
        metavar="FILE",
        help="public text or word file whose tokens are the candidates (implies --candidates public_vocab); never "
        "the input (default: none)",
    )
    p.add_argument(
        "--candidate-classes",
        default=None,
        choices=CLASS_MODES,
        help="preserve: a word-initial token is replaced by a word-initial one and a continuation piece by a "
        "continuation, each class its own metric space (docs/mechanisms/space.md §7); mix: one space over all "
        "candidates (default: preserve)",
    )


def _add_option_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o",
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="mechanism/post-processing option, repeatable, e.g. -o bound=clip -o beta=0.9; VALUE is JSON when it "
        "parses (the options of each mechanism: docs/mechanisms/) (default: none)",
    )


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
        p.add_argument("--device", default="cpu", help="where the privatizers run: cpu, cuda or cuda:N (default cpu)")
        p.set_defaults(command=EvaluateCommand)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from .evaluation.recipe import run_recipes  # the eval extra's layer; importing it costs ~2 s (evaluate)

        root = Path(args.output or "results")
        done = run_recipes(
            args.recipe,
            root,
            jobs=args.jobs,
            device=args.device,
            resume=not args.no_resume,
            progress=lambda m: print(m, flush=True),
        )
        for folder, written in done:
            print(f"wrote {len(written)} result files and plots in {folder}")
        print(f"summary {root / 'README.md'}")
        return 0


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
            formatter_class=_HelpFormatter,
            epilog=_options_epilog(),
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
        _add_config_args(p, epsilon_required=False)
        p.add_argument("--max-rows", type=int, default=None, help="attack the first N private rows (default: all)")
        p.add_argument("--no-contextual", action="store_true", help="skip the contextual attack (faster)")
        p.set_defaults(command=AttackCommand)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from .evaluation.attacks.cli import attack_files, format_record  # the eval extra's layer
        from .evaluation.attacks.recipe import run_attack_recipe

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
        record = attack_files(
            _config_from_args(args),
            Path(args.private),
            [Path(p) for p in args.public],
            max_rows=args.max_rows,
            contextual=not args.no_contextual,
            progress=lambda m: print(m, file=sys.stderr, flush=True),
        )
        print(format_record(record))
        if args.output:
            Path(args.output).write_text(dumps_json(record), encoding="utf-8")
            print(f"wrote {args.output}")
        return 0


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
        from .cards import render_card

        if args.output and Path(args.output).exists() and not args.overwrite:
            raise OutputExistsError(f"--output {args.output!r} already exists; pass --overwrite to replace it.")
        card = render_card(args.path)
        if args.output:
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
            Path(args.output).write_text(str(card), encoding="utf-8")
            print(f"wrote {args.output}")
        else:
            sys.stdout.write(str(card) + "\n")
        return 0


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
        p.add_argument("repo_id")
        p.add_argument("--private", action="store_true")
        p.add_argument("--token", default=None)
        p.add_argument(
            "--allow-original",
            action="store_true",
            help="publish a dataset that holds *_original columns (the input text, NOT private; refused "
            "otherwise); its card then says the dataset is not private",
        )
        p.set_defaults(command=PushCommand)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from .hub import push_to_hub

        url = push_to_hub(
            args.path, args.repo_id, private=args.private, token=args.token, allow_original=args.allow_original
        )
        print(f"pushed {args.path} to {url}")
        return 0


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
        p.add_argument("--rows", type=int, default=4000)
        p.add_argument("--json", default=None, metavar="FILE", help="also write the results as JSON")
        p.add_argument("--epsilon", type=float, default=10.0)
        p.add_argument("--batch-size", type=int, default=1000)
        p.add_argument("--repeats", type=int, default=3, help="timed passes per case (the best counts; default 3)")
        p.add_argument("--one-word-rows", action="store_true", help="one whitespace word per row")
        p.add_argument("--no-cold-start", action="store_true", help="skip the cold CLI run on 30 rows")
        p.add_argument("--memory", action="store_true", help="also privatize the whole text with the CLI (peak RSS)")
        p.set_defaults(command=BenchCommand)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from .bench import format_table, run_bench

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
            Path(args.json).write_text(dumps_json(report.to_dict()), encoding="utf-8")
        return 0


COMMANDS: list[Any] = [
    PrivatizeCommand,
    CalibrateCommand,
    ReportCommand,
    AuditCommand,
    EnvCommand,
    EvaluateCommand,
    AttackCommand,
    CardCommand,
    PushCommand,
]
COMMANDS.append(BenchCommand)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2 (argparse's convention too)
        sys.stderr.write(f"hf-textdp: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hf-textdp", description="Differentially private text at the subword-token level.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=_Parser)
    for cmd in COMMANDS:
        cmd.register_subcommand(sub)
    for command in sub.choices.values():  # also after the command (SUPPRESS: an absent flag keeps the top level's)
        command.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks (default: off)"
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "command", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        code: int = args.command.run(args)
        return code
    except HfTextDPError as err:
        if args.debug:
            raise
        sys.stderr.write(f"hf-textdp: error: {' '.join(str(err).split())}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("hf-textdp: interrupted\n")
        return 130
    except Exception as err:  # noqa: BLE001 - one line unless --debug
        if args.debug:
            raise
        sys.stderr.write(f"hf-textdp: error: {type(err).__name__}: {' '.join(str(err).split())[:500]}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
