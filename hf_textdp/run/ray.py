"""``privatize_ray``: the same :class:`~hf_textdp.Privatizer` over a ``ray.data.Dataset``.

Optional extra: ``pip install 'hf-textdp[ray]'``. Ray Data schedules the work; this module only supplies the
transform. Each actor of the pool receives the privatizer's pickled state (config, seed, columns: decision
D4), loads the embedding matrix once, and privatizes its batches; a lost actor is restarted and its batches
are retried by Ray Data, so every row is released exactly once.

**Row ids.** Ray blocks have no global row index (Ray Data may split, merge and reorder blocks), so a seeded
run needs ``id_column=``: an int column holding each row's id, assigned from the source order *before* any
repartitioning, for example ``hf_ds.add_column("id", range(len(hf_ds)))`` before
``ray.data.from_huggingface(hf_ds)``, or an id column written into the parquet/jsonl files. With it, row k
draws the noise of index k in an in-memory run (docs/mechanisms/randomness.md), so the output equals the
single-process output row for row, whatever the block layout, the batch size or the number of actors. Match rows by
the id column:
Ray Data does not promise the order of output rows (even ``execution_options.preserve_order = True`` left
blocks of a written file out of order in about one run in five here, ray 2.60). Without a seed every row
draws fresh OS entropy and no id is needed.

**The seed** travels to the actors inside Ray's object store, as it travels to ``num_proc`` workers in a
local run; Ray may spill objects to its local temporary folder under memory pressure. Run seeded jobs on a
cluster you trust with the key.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.parquet as pq

from ..config import PrivatizerConfig
from ..errors import ColumnNotFoundError, InvalidParameterError, MissingExtraError, ParameterTypeError
from ..io.files import atomic_path, atomic_write_text, dumps_json
from ..io.outputs import check_not_input, refuse_existing_output
from ..io.paths import REPORT_NAME, output_path, report_path_for
from ..io.reports import bound_report
from ..privatizer import Privatizer
from ..rng import validate_secret_seed
from ..users import user_totals_from_batches
from ..utils.logging import get_logger
from ..validation import check_int
from .totals import totals_from_columns
from .users import finish_parquet, mapped_drops


__all__ = ["privatize_ray", "privatize_ray_files", "ray_report", "RAY_INSTALL"]

logger = get_logger("hf_textdp.ray")  # the name its log lines have always carried (issue 38 moved the module)

RAY_INSTALL = "pip install 'hf-textdp[ray]'"

# The arrow types ``Dataset.map`` gives the released columns (datasets stores input_ids as int32 and
# attention_mask as int8), so Ray and local outputs have one schema, and no block gets a ``null`` column (a
# batch whose dp_epsilon values are all null).
_COLUMN_TYPES = {
    "input_ids": pa.list_(pa.int32()),
    "attention_mask": pa.list_(pa.int8()),
    "dp_tokens": pa.int64(),
    "dp_epsilon": pa.float64(),
    "dp_delta": pa.float64(),
    "dp_sensitive_tokens": pa.int64(),
    "dp_dropped": pa.bool_(),
    "inputs_embeds": pa.list_(pa.list_(pa.float64())),
}


def _import_ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError as err:
        raise MissingExtraError(
            f"privatize_ray needs Ray Data, which is not installed; install it with: {RAY_INSTALL}"
        ) from err
    return ray


class _PrivatizeBatches:
    """A Ray Data actor: a privatizer rebuilt from its pickled state, with the matrix loaded once."""

    def __init__(self, state: dict[str, Any]) -> None:
        config = PrivatizerConfig(**state["config"])
        if config.device.startswith("cuda:"):  # Ray gives the actor its GPU as device 0 (CUDA_VISIBLE_DEVICES)
            state = {**state, "config": dataclasses.replace(config, device="cuda").to_dict()}
        priv = Privatizer.__new__(Privatizer)
        priv.__setstate__(state)
        priv.engine.load()  # load the matrix now, once per actor, not on the first batch
        self.priv = priv

    def __call__(self, table: pa.Table) -> pa.Table:
        priv = self.priv
        batch: dict[str, list[Any]] = {priv.text_column: table.column(priv.text_column).to_pylist()}
        if priv.id_column is not None:
            batch[priv.id_column] = table.column(priv.id_column).to_pylist()
        spans = None if priv.config.sensitive is None else priv.config.sensitive.column
        users = None if priv.config.user is None else priv.config.user.column  # per-person accounting (users.md)
        for column in (spans, users):  # selective privatization's spans, each row's user
            if column is not None and column in table.schema.names:
                batch[column] = table.column(column).to_pylist()
        out = priv(batch)
        for name, values in out.items():
            column = pa.array(values, type=_COLUMN_TYPES.get(name, pa.string()))
            index = table.schema.get_field_index(name)
            table = table.set_column(index, name, column) if index >= 0 else table.append_column(name, column)
        # the span column unless keep_spans (the user column goes once the per-user figures are read: users.md §6)
        drop = [c for c in mapped_drops(priv) if c in table.schema.names]
        return table.drop_columns(drop) if drop else table


def _compute(concurrency: int | tuple[int, int] | None) -> Any:
    import ray.data

    if concurrency is None:
        return ray.data.ActorPoolStrategy(min_size=1, max_size=None)
    if isinstance(concurrency, tuple):
        lo, hi = concurrency
        return ray.data.ActorPoolStrategy(min_size=lo, max_size=hi)
    return ray.data.ActorPoolStrategy(size=concurrency)


def _check_concurrency(concurrency: Any) -> None:
    def ok(n: Any) -> bool:
        return isinstance(n, int) and not isinstance(n, bool) and n >= 1

    pair = isinstance(concurrency, tuple) and len(concurrency) == 2 and all(ok(n) for n in concurrency)
    if concurrency is None or ok(concurrency) or (pair and concurrency[0] <= concurrency[1]):
        return
    raise InvalidParameterError(
        f"concurrency must be None, an int >= 1 or a (min, max) tuple of ints with 1 <= min <= max, "
        f"got {concurrency!r}."
    )


def _check_ray_arguments(
    ds: Any,
    config: PrivatizerConfig,
    text_column: str,
    id_column: str | None,
    seed: int | None,
    batch_size: int,
    concurrency: int | tuple[int, int] | None,
) -> None:
    """The arguments of :func:`privatize_ray` and the columns its dataset's schema names (when Ray knows it)."""
    ray = _import_ray()
    if not isinstance(config, PrivatizerConfig):
        raise ParameterTypeError(f"config must be a PrivatizerConfig, got {type(config).__name__}.")
    if not isinstance(ds, ray.data.Dataset):
        raise ParameterTypeError(f"ds must be a ray.data.Dataset, got {type(ds).__name__}.")
    if seed is not None and id_column is None:
        raise InvalidParameterError(
            "id_column is required with a seed: Ray blocks have no global row index. Add an int column holding "
            "each row's index in the source before any repartitioning (e.g. hf_ds.add_column('id', "
            "range(len(hf_ds))) before ray.data.from_huggingface, or an id column in the parquet files) and pass "
            "id_column=."
        )
    check_int(batch_size, "batch_size", minimum=1)
    _check_concurrency(concurrency)
    schema = ds.schema(fetch_if_missing=False)
    names = list(schema.names) if schema is not None else []
    span_column = ("sensitive['column']", None if config.sensitive is None else config.sensitive.column)
    user_column = ("user['column']", None if config.user is None else config.user.column)  # users.md
    for param, column in (("text_column", text_column), ("id_column", id_column), span_column, user_column):
        if names and column is not None and column not in names:
            raise ColumnNotFoundError(
                f"{param}={column!r} is not in the dataset. Current columns in the dataset: {names}."
            )


def privatize_ray(
    ds: Any,
    config: PrivatizerConfig,
    text_column: str = "text",
    id_column: str | None = None,
    seed: int | None = None,
    split: str = "",
    *,
    allow_weak_seed: bool = False,
    batch_size: int = 1000,
    concurrency: int | tuple[int, int] | None = None,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    keep_spans: bool = False,
) -> Any:
    """Privatize the ``text_column`` of a ``ray.data.Dataset`` with an actor pool (lazy, like all of Ray Data).

    Args:
        ds (`ray.data.Dataset`): the rows; other columns pass through unchanged.
        config (`PrivatizerConfig`): what to privatize with.
        text_column (`str`, defaults to `"text"`): the column to privatize (replaced in place).
        id_column (`str`, *optional*): int column of row ids (source order). Required with a seed: Ray blocks
            have no global row index.
        seed (`int`, *optional*): secret key; with ``id_column``, the output equals a single-process run's.
        split (`str`, defaults to `""`): split name, part of the noise key.
        allow_weak_seed (`bool`, defaults to `False`): accept a seed below 2**32 (it can be searched), for
            public benchmark data only.
        batch_size (`int`, defaults to `1000`): rows per batch (outputs do not depend on it).
        concurrency (`int` or `(min, max)`, *optional*): actors in the pool: a fixed number, or an autoscaling
            range (default: autoscale from 1 as the cluster allows). A fixed pool of N actors needs N actors'
            CPUs *plus* room for Ray's read and write tasks, else Ray Data waits forever: on one machine with N
            cores, start Ray with more logical CPUs (``ray.init(num_cpus=N + 1)``) or pass ``(1, N)``.
        num_cpus (`float`, *optional*): CPUs per actor (Ray's default: 1; torch then uses one thread).
        num_gpus (`float`, *optional*): GPUs per actor; defaults to 1 when ``config.device`` is CUDA (an
            actor's GPU is its ``cuda`` device, whatever ``cuda:N`` the config names).

    Returns:
        `ray.data.Dataset`: the input columns with the text replaced, plus ``input_ids``, ``attention_mask``,
        ``dp_tokens``, ``dp_epsilon`` (``dp_delta``), as ``Dataset.map`` gives them.

    Raises:
        MissingExtraError: Ray Data is not installed.
        InvalidParameterError: a seed without ``id_column``, a seed below 2**32 without ``allow_weak_seed=True``,
            or a bad parameter.

    Example:

    >>> import ray, datasets                                                      # doctest: +SKIP
    >>> hf = datasets.load_dataset("imdb", split="train")                         # doctest: +SKIP
    >>> hf = hf.add_column("id", range(len(hf)))                                  # doctest: +SKIP
    >>> ds = privatize_ray(ray.data.from_huggingface(hf), PrivatizerConfig(epsilon=10.0),
    ...                    id_column="id", seed=seed, concurrency=8)              # doctest: +SKIP
    >>> ds.write_parquet("s3://bucket/imdb-private/")                             # doctest: +SKIP
    """
    _check_ray_arguments(ds, config, text_column, id_column, seed, batch_size, concurrency)
    priv = Privatizer(
        config,
        seed=seed,
        text_column=text_column,
        id_column=id_column,
        split=split,
        allow_weak_seed=allow_weak_seed,
        keep_spans=keep_spans,
    )
    if num_gpus is None and config.device.startswith("cuda"):
        num_gpus = 1
    resources = {name: n for name, n in (("num_cpus", num_cpus), ("num_gpus", num_gpus)) if n is not None}
    return ds.map_batches(
        _PrivatizeBatches,
        fn_constructor_kwargs={"state": _counted(priv, ds, batch_size).__getstate__()},  # users.md §4
        batch_size=batch_size,
        batch_format="pyarrow",
        compute=_compute(concurrency),
        **resources,
    )


def _counted(priv: Privatizer, ds: Any, batch_size: int) -> Privatizer:
    """``priv`` after the counting pass (users.md §4) in the driver, over the rows' text, user, id and span
    columns (where its release needs one)."""
    users = priv.users
    if users is None or not users.needs_counts:
        return priv
    if priv.id_column is None:
        raise InvalidParameterError(
            "id_column is required with a user budget, user['bound'] = 'rows' or sensitive['consistent'] = 'user' "
            "under Ray: the counting pass and the actors must name each row alike."
        )
    span_column = None if priv.config.sensitive is None else priv.config.sensitive.column
    user_column = None if users.spec is None else users.spec.column
    columns = [c for c in (priv.text_column, priv.id_column, user_column, span_column) if c]
    batches = ds.select_columns(columns).iter_batches(batch_size=batch_size, batch_format="pyarrow")
    priv.fit_users((t.to_pydict() for t in batches), batch_size=batch_size)
    return priv


def ray_report(
    written: Any,
    config: PrivatizerConfig,
    *,
    text_column: str = "text",
    split: str = "",
) -> dict[str, Any]:
    """The privacy report (accounting.md §4) of privatized rows, counted from the rows themselves.

    Only ``input_ids``, ``dp_tokens`` and ``dp_epsilon``/``dp_delta`` stream to the driver (batch by batch,
    never the text), so the totals count exactly the rows of ``written``, whatever Ray retried on the way.

    Args:
        written (`ray.data.Dataset`): the privatized rows, typically read back from what was written
            (``ray.data.read_parquet(OUTPUT)``).
        config (`PrivatizerConfig`): the config they were privatized with.
        text_column (`str`, defaults to `"text"`), split (`str`, defaults to `""`): as given to
            :func:`privatize_ray` (they do not change the counts).

    Raises:
        InvalidParameterError: the rows have no ``input_ids`` (``postprocess="vector"``).
    """
    _import_ray()
    priv = Privatizer(config, text_column=text_column, split=split)
    schema = written.schema()
    names = list(schema.names) if schema is not None else []
    if "input_ids" not in names:
        raise InvalidParameterError(
            f"the rows have no input_ids column (columns: {names}); a report of postprocess='vector' outputs needs "
            "the local engine."
        )
    cols = [c for c in ("input_ids", "dp_tokens", "dp_epsilon", "dp_delta") if c in names]
    users = None
    spec = config.user_spec
    if spec is not None:  # per-user figures from the rows, then the rows without the dropped ones (users.md §6)
        extra = [c for c in (spec.column, "dp_dropped") if c in names and c not in cols]
        tables = written.select_columns(cols + extra).iter_batches(batch_size=4096, batch_format="pyarrow")
        users = user_totals_from_batches((t.to_pydict() for t in tables), spec)
        written = written.filter(lambda r: not r.get("dp_dropped", False))
    batches = (
        t.to_pydict() for t in written.select_columns(cols).iter_batches(batch_size=4096, batch_format="pyarrow")
    )
    return priv.engine.build_report(totals_from_columns(priv.engine.space, batches), users=users)


# --------------------------------------------------------------------------- files in, files out (the CLI)
_READERS = {".parquet": "read_parquet", ".jsonl": "read_json", ".json": "read_json", ".csv": "read_csv"}


def _read(source: str | os.PathLike[str]) -> Any:
    import ray.data

    path = Path(source).expanduser()
    if path.is_dir() and ((path / "state.json").is_file() or (path / "dataset_dict.json").is_file()):
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            raise InvalidParameterError(
                f"source={str(source)!r} is a DatasetDict with splits {sorted(loaded)}; pass the split's folder."
            )
        return ray.data.from_huggingface(loaded)
    if path.is_dir():
        return ray.data.read_parquet(str(path))
    reader = _READERS.get(path.suffix.lower())
    if not path.is_file() or reader is None:
        raise InvalidParameterError(
            f"source={str(source)!r}: --engine ray reads a .parquet/.jsonl/.json/.csv file, a folder of parquet "
            "files or a save_to_disk folder."
        )
    return getattr(ray.data, reader)(str(path))


def _merge_parquet(folder: Path, target: Path) -> None:
    """Concatenate the parquet files Ray wrote (in file-name order) into one file, row group by row group."""
    files = sorted(p for p in folder.rglob("*.parquet"))
    schemas = [pq.read_schema(p).remove_metadata() for p in files]
    schema = pa.unify_schemas(schemas, promote_options="permissive") if schemas else pa.schema([])
    # datasets' features metadata, as Dataset.to_parquet writes it, so load_dataset("parquet") sees the same types
    schema = datasets.Features.from_arrow_schema(schema).arrow_schema
    with pq.ParquetWriter(str(target), schema) as writer:
        for p in files:
            pf = pq.ParquetFile(p)
            for i in range(pf.num_row_groups):
                writer.write_table(pf.read_row_group(i).cast(schema))


def privatize_ray_files(
    source: str | os.PathLike[str],
    output: str | os.PathLike[str],
    config: PrivatizerConfig,
    *,
    text_column: str = "text",
    id_column: str | None = None,
    seed: int | None = None,
    allow_weak_seed: bool = False,
    split: str = "",
    batch_size: int = 1000,
    concurrency: int | tuple[int, int] | None = None,
    overwrite: bool = False,
    keep_spans: bool = False,
) -> dict[str, Any]:
    """Read a file or folder with Ray Data, privatize it, write parquet and the report (``--engine ray``).

    ``output`` is a ``.parquet`` file (the files Ray writes, merged in the driver) or a folder of parquet files
    with ``privacy_report.json`` inside. Rows are mostly in source order (Ray Data is asked to preserve it) but
    not always: match them by the id column. Connects to the cluster named by ``RAY_ADDRESS`` (e.g. ``auto``) or
    starts a local Ray. On a cluster, ``source`` and ``output`` must be paths every node sees. ``concurrency=N``
    (the CLI's ``--num-proc``) is an autoscaling pool of 1 to N actors, so a small machine never waits forever
    for a CPU (see :func:`privatize_ray`). Returns the report, counted from the rows read back from ``output``.
    """
    ray = _import_ray()
    validate_secret_seed(seed, allow_weak_seed=allow_weak_seed)  # fail before Ray starts
    out = output_path(output, "output")
    if out.suffix and out.suffix.lower() != ".parquet":
        raise InvalidParameterError(
            f"output {str(output)!r}: --engine ray writes parquet: a .parquet file or a folder (no extension)."
        )
    check_not_input(out, [source])
    refuse_existing_output(out, overwrite=overwrite)
    if config.postprocess == "vector":
        raise InvalidParameterError(
            "postprocess='vector' is not available with --engine ray (its report needs the input's token classes); "
            "use the local engine."
        )
    if not ray.is_initialized():  # RAY_ADDRESS (e.g. "auto") names a cluster; else a local Ray starts
        ray.init(log_to_driver=False)
    context = ray.data.DataContext.get_current()
    preserve_order = context.execution_options.preserve_order
    context.execution_options.preserve_order = True  # mostly source order: cheap, though Ray does not promise it
    try:
        ds = privatize_ray(
            _read(source),
            config,
            text_column=text_column,
            id_column=id_column,
            seed=seed,
            allow_weak_seed=allow_weak_seed,
            split=split,
            batch_size=batch_size,
            concurrency=(1, concurrency) if isinstance(concurrency, int) else concurrency,
            keep_spans=keep_spans,
        )
        is_file = out.suffix.lower() == ".parquet"
        with atomic_path(out, is_dir=not is_file) as tmp:
            written = tmp.with_name(tmp.name + ".parts") if is_file else tmp
            ds.write_parquet(str(written))
            # the report counts the rows as written, whatever was retried on the way
            report = ray_report(ray.data.read_parquet(str(written)), config, text_column=text_column, split=split)
            finish_parquet(written, config)  # dropped rows and the user column out (users.md §6)
            if is_file:  # the report is bound to the output it describes (io/reports.py), as save_output's are
                _merge_parquet(written, tmp)
                atomic_write_text(report_path_for(out), dumps_json(bound_report(report, tmp)))
            else:
                (tmp / REPORT_NAME).write_text(dumps_json(bound_report(report, tmp)), encoding="utf-8")
    finally:
        context.execution_options.preserve_order = preserve_order
    logger.info(
        "privatized %d rows with Ray (%s, epsilon=%g per token) into %s",
        report["totals"]["rows"],
        config.mechanism,
        config.epsilon,
        out,
    )
    return report
