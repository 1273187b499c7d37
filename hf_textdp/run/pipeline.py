"""``privatize_dataset``: load, map with a :class:`Privatizer`, save atomically with the report, resume.

A saved output is the data (a .jsonl/.csv/.parquet file or a ``save_to_disk`` folder) plus its privacy
report (``OUTPUT.privacy_report.json`` beside a file, ``privacy_report.json`` inside a folder).

**Shards.** With an output, each split is privatized in shards of ``shard_size`` rows (row ids stay the
rows' indices in their split, so a seeded output does not depend on the shard size). Every shard is
written atomically (temporary sibling, ``fsync``, rename) into a hidden work folder beside the output::

    .OUTPUT.partial/
        manifest.json             what the job is: hashes of the config and of the input, sizes, each
                                  finished shard's SHA-256; sealed (hf_textdp.io.integrity)
        lock                      held by the running process; the kernel drops it when the process dies
        split-000/shard-00000.arrow, shard-00001.arrow, ...

When every shard is there, the data and the report are written inside the work folder and renamed into
place, then the work folder is removed. A run killed at any point (SIGKILL included) leaves either no
output, only the work folder, or the complete output. ``resume=True`` reuses the finished shards when the
manifest matches this run and computes only the missing ones; ``overwrite=True`` discards them.

**Nothing secret in the work folder or the output** (accounting.md §5). The manifest holds no text and not the
seed: only whether a seed was used and a salted scrypt verifier of it, which refuses a resume with another seed
and keys the manifest's seal (docs/threat_model.md). A resumed shard is reused only when its file has the
SHA-256 the manifest records. A saved dataset gets a fresh random fingerprint, because the in-process
fingerprint is a hash of the seeded :class:`Privatizer`.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..config import PrivatizerConfig
from ..errors import ColumnNotFoundError, InvalidParameterError, ParameterTypeError
from ..io.frequencies import check_not_input as check_public
from ..io.outputs import check_not_input, input_paths, output_errors, refuse_existing_output
from ..io.paths import FILE_FORMATS, output_path
from ..io.sources import load_source, stream_saved_output
from ..io.workdir import DEFAULT_SHARD_SIZE
from ..privatizer import Privatizer
from ..rng import validate_secret_seed
from ..utils.logging import get_logger
from ..validation import check_bool, check_int, repeated_id_error
from .sharded import ShardedRun
from .streaming import save_streaming
from .users import finish, fit_splits, mapped_drops
from .workers import spawned_workers, uses_gpu_workers


__all__ = ["privatize_dataset", "save_privatized", "DEFAULT_SHARD_SIZE"]

#: False inside save_privatized: a streaming run returns no stream over its saved output (nobody reads it)
_WANT_RESULT: ContextVar[bool] = ContextVar("hf_textdp_want_result", default=True)

logger = get_logger("hf_textdp.pipeline")  # the name its log lines have always carried (issue 38 moved the module)


def _columns(ds: Any) -> list[str]:
    cols = getattr(ds, "column_names", None)
    if cols is None and getattr(ds, "features", None) is not None:
        cols = list(ds.features)
    return list(cols or [])


def privatize_dataset(
    source: Any,
    config: PrivatizerConfig,
    *,
    text_column: str = "text",
    split: str | None = None,
    num_proc: int | None = None,
    seed: int | None = None,
    allow_weak_seed: bool = False,
    id_column: str | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    streaming: bool = False,
    resume: bool = False,
    overwrite: bool = False,
    batch_size: int = 1000,
    shard_size: int = DEFAULT_SHARD_SIZE,
    return_report: bool = False,
    keep_spans: bool = False,
) -> Any:
    """Privatize the ``text_column`` of a dataset; optionally save it with its privacy report.

    Args:
        source: a ``Dataset``, ``DatasetDict``, ``IterableDataset``, hub id, folder, or .jsonl/.csv/.parquet file.
        config (`PrivatizerConfig`): what to privatize with.
        text_column (`str`, defaults to `"text"`): the column to privatize.
        split (`str`, *optional*): select one split of a ``DatasetDict``; also the noise key.
        num_proc (`int`, *optional*): worker processes for ``Dataset.map``. On a CUDA device the workers tokenize and
            decode on CPU and this process alone releases their batches on the GPU (the ``release_service_off`` switch
            of :mod:`hf_textdp.settings`: each worker uses the GPU itself); the output is the same.
        seed (`int`, *optional*): secret key for reproducible noise (never saved; ≥ 64 random bits).
        allow_weak_seed (`bool`, defaults to `False`): accept a seed below 2**32 (it can be searched), for public
            benchmark data only.
        id_column (`str`, *optional*): int column used as the row id instead of the index. Ids must be unique: a
            ``Dataset`` with a repeated id is refused before any row is privatized (a stream, batch by batch).
        output_dir (`str`, *optional*): where to save (file by extension, else a folder). Refused when it exists
            (unless ``overwrite``) or when it is, or contains, the input.
        streaming (`bool`, defaults to `False`): stream the source (``IterableDataset``).
        resume (`bool`, defaults to `False`): continue a killed run from its finished shards (the same config, input,
            shard size and seed: the seed is not stored; the first rows of the partial run, privatized again, must
            agree).
        overwrite (`bool`, defaults to `False`): replace an existing output (and discard a partial run): a file output,
            an empty folder or an earlier output folder (it holds ``privacy_report.json``), never another folder.
        batch_size (`int`, defaults to `1000`): rows per ``map`` batch (outputs do not depend on it).
        shard_size (`int`, defaults to `10000`): rows per shard of a saved output, the unit of ``resume`` (outputs do
            not depend on it).
        return_report (`bool`, defaults to `False`): return ``(dataset, report)``: the report saved with the output
            (less its ``output_sha256``).
        keep_spans (`bool`, defaults to `False`): keep the span column of ``sensitive["column"]`` in the output (it
            gives each identifier's character positions in the original text; dropped by default).

    Returns:
        The same kind as ``source`` (a file or path source gives a ``Dataset``), with the text replaced and the columns
        ``input_ids``, ``attention_mask``, ``dp_tokens``, ``dp_epsilon`` (``dp_delta``). With a folder output it is the
        saved dataset (memory-mapped); with a file output, the same rows in memory; with ``streaming=True`` and an
        output, a stream over the saved output (iterating it reads the saved rows and never privatizes the source
        again). The report is ``hf_textdp.privacy_report(output_dir)``, or the second item with ``return_report=True``.

    Raises:
        OutputExistsError: the output exists, is the input, or a partial run exists (see ``resume``); with
            ``overwrite``, the output is a folder this package did not write.
        ResumeError: ``resume=True`` found a partial run of another config or input.
        ColumnNotFoundError, InvalidRowError, InvalidParameterError: bad columns, rows or parameters (a
            seed below 2**32 without ``allow_weak_seed=True``).

    Example:

    >>> ds = privatize_dataset("reviews.jsonl", PrivatizerConfig(epsilon=10.0), seed=secrets.randbits(64),
    ...                        output_dir="reviews.private.jsonl")      # doctest: +SKIP
    """
    job = _Job.checked(
        config, output_dir, num_proc, batch_size, shard_size, streaming, resume, overwrite, return_report
    )
    validate_secret_seed(seed, allow_weak_seed=allow_weak_seed)  # fail before loading anything
    ds, parts = _load_checked(source, split, job)
    privatizers = {
        name: _privatizer(part, name, config, text_column, id_column, seed, allow_weak_seed, keep_spans)
        for name, part in parts.items()
    }
    result, report = _privatize(ds, parts, privatizers, job)
    return (result, report) if return_report else result


def save_privatized(source: Any, config: PrivatizerConfig, **kwargs: Any) -> dict[str, Any]:
    """The report of ``privatize_dataset(source, config, return_report=True, **kwargs)`` (``output_dir`` given),
    without the dataset it returns: what the CLI needs. A streaming run's returned stream over the saved output
    costs a ``load_dataset`` of that output (1.4 s after MR x 10; issue 58 item 3), which a caller that only prints
    the report need not pay."""
    token = _WANT_RESULT.set(False)
    try:
        _, report = privatize_dataset(source, config, return_report=True, **kwargs)
    finally:
        _WANT_RESULT.reset(token)
    return cast("dict[str, Any]", report)


@dataclass
class _Job:
    """The checked arguments of one :func:`privatize_dataset` call that say how it runs and where it writes."""

    config: PrivatizerConfig
    output: Path | None
    num_proc: int | None
    batch_size: int
    shard_size: int
    streaming: bool
    resume: bool
    overwrite: bool

    @classmethod
    def checked(
        cls,
        config: Any,
        output_dir: Any,
        num_proc: Any,
        batch_size: Any,
        shard_size: Any,
        streaming: Any,
        resume: Any,
        overwrite: Any,
        return_report: Any,
    ) -> _Job:
        """The types and ranges of the arguments, checked before anything is read."""
        if not isinstance(config, PrivatizerConfig):
            raise ParameterTypeError(f"config must be a PrivatizerConfig, got {type(config).__name__}.")
        if num_proc is not None and (isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1):
            raise InvalidParameterError(f"num_proc must be an int >= 1 or None, got {num_proc!r}.")
        check_int(batch_size, "batch_size", minimum=1)
        check_int(shard_size, "shard_size", minimum=1)
        flags = (
            ("streaming", streaming),
            ("resume", resume),
            ("overwrite", overwrite),
            ("return_report", return_report),
        )
        for name, value in flags:
            check_bool(value, name)
        output = output_path(output_dir) if output_dir is not None else None
        if return_report and output is None:
            raise InvalidParameterError(
                "return_report=True needs output_dir: the report counts the saved rows (a map served from the "
                "datasets cache or run in worker processes is not counted in this process)."
            )
        return cls(config, output, num_proc, batch_size, shard_size, streaming, resume, overwrite)


def _load_checked(source: Any, split: str | None, job: _Job) -> tuple[Any, dict[str, Any]]:
    """Load the source (its splits by name) with every input checked once: the source's own path before loading
    anything, its splits' files after; an existing output refused as ``resume``/``overwrite`` say."""
    output = job.output
    checked = _check_inputs(job.config, output, source, {}, set())
    if output is not None and not job.overwrite and not (job.resume and job.streaming):
        refuse_existing_output(output, resume=job.resume)
    ds = load_source(source, split=split, streaming=job.streaming)
    is_dict = isinstance(ds, (datasets.DatasetDict, datasets.IterableDatasetDict))
    parts: dict[str, Any] = dict(ds.items()) if is_dict else {split or "": ds}
    _check_inputs(job.config, output, source, parts, checked)
    if output is not None:
        if job.overwrite:  # after the input check, which names the more precise reason
            refuse_existing_output(output, overwrite=True)
        if is_dict and output.suffix.lower() in FILE_FORMATS:
            raise InvalidParameterError(
                f"output {str(output)!r}: a dataset with splits {sorted(parts)} needs a folder output (no "
                "extension) or split=."
            )
    return ds, parts


def _privatize(
    ds: Any, parts: dict[str, Any], privatizers: dict[str, Privatizer], job: _Job
) -> tuple[Any, dict[str, Any] | None]:
    """Map every split with its privatizer; with an output, save it and return the report written with it."""
    config, output = job.config, job.output
    iterable = isinstance(ds, (datasets.IterableDataset, datasets.IterableDatasetDict))
    fit_splits(privatizers, parts, resume=job.resume, batch_size=job.batch_size)  # users.md §4: counts, no release
    release = None
    if uses_gpu_workers(config.device, job.num_proc) and not iterable:
        # the workers tokenize and decode; this process releases on the GPU (every split's privatizer has
        # the same configuration, and a release depends only on the keys the workers derive)
        first = next(iter(privatizers.values())).engine
        first.load()  # on the GPU, before the workers start
        release = first.release_keyed
    if output is None or iterable:
        out = _map(ds, parts, privatizers, config, batch_size=job.batch_size, num_proc=job.num_proc, release=release)
        if output is None:  # dropped rows and the user column out (users.md §6); a saved stream keeps them
            return finish(out, next(iter(privatizers.values()))), None
        with output_errors(output):
            report = save_streaming(
                out, output, privatizers, resume=job.resume, overwrite=job.overwrite, shard_size=job.shard_size
            )
        # a stream over the saved rows: iterating the mapped stream again would privatize the source
        # a second time (fresh noise without a seed: a second release of the same text)
        return (stream_saved_output(output) if _WANT_RESULT.get() else None), report
    for priv in privatizers.values():
        priv.engine.load()  # load the model now: a bad model fails before anything is written
    is_dict = isinstance(ds, datasets.DatasetDict)
    run = ShardedRun(
        parts,
        privatizers,
        output,
        config,
        is_dict=is_dict,
        shard_size=job.shard_size,
        batch_size=job.batch_size,
        num_proc=job.num_proc,
    )
    with output_errors(output), spawned_workers(config.device, job.num_proc, release):
        result, report = run.execute(resume=job.resume, overwrite=job.overwrite)
    totals = report["totals"]
    logger.info(
        "privatized %d rows (%s, epsilon=%g per token) into %s",
        totals["rows"],
        config.mechanism,
        config.epsilon,
        output,
    )
    return result, report


def _check_inputs(
    config: PrivatizerConfig, output: Path | None, source: Any, parts: dict[str, Any], checked: set[str]
) -> set[str]:
    """Refuse an output that is (or holds) an input and a public file that is the input, for the inputs not in
    ``checked`` (the source's path before loading; the splits and their cache files after). Returns the paths
    checked, ``checked`` included."""
    paths = [p for p in dict.fromkeys(input_paths(source, parts)) if p not in checked]
    if output is not None:
        check_not_input(output, paths)
    objects = [] if checked or isinstance(source, (str, os.PathLike)) else [source]  # a path is in ``paths``
    objects += [part for part in parts.values() if part is not source]
    _check_public_inputs(config, [*objects, *paths])
    return checked | set(paths)


def _privatizer(
    part: Any,
    name: str,
    config: PrivatizerConfig,
    text_column: str,
    id_column: str | None,
    seed: int | None,
    allow_weak_seed: bool,
    keep_spans: bool,
) -> Privatizer:
    """The privatizer of split ``name`` once its columns are checked (and its ids, for a ``Dataset``)."""
    cols = _columns(part)
    if cols and text_column not in cols:
        raise ColumnNotFoundError(
            f"text_column={text_column!r} is not in the dataset. Current columns in the dataset: {cols}."
        )
    if id_column is not None and cols and id_column not in cols:
        raise ColumnNotFoundError(
            f"id_column={id_column!r} is not in the dataset. Current columns in the dataset: {cols}."
        )
    span_column = None if config.sensitive is None else config.sensitive.column
    user_column = None if config.user is None else config.user.column  # per-person accounting (users.md)
    for param, column in (('sensitive["column"]', span_column), ('user["column"]', user_column)):
        if column is not None and cols and column not in cols:
            raise ColumnNotFoundError(
                f"{param}={column!r} is not in the dataset. Current columns in the dataset: {cols}."
            )
    if id_column is not None and isinstance(part, datasets.Dataset):
        _check_unique_ids(part, id_column, name)
    return Privatizer(
        config,
        seed=seed,
        text_column=text_column,
        id_column=id_column,
        split=name,
        allow_weak_seed=allow_weak_seed,
        keep_spans=keep_spans,
    )


def _map(
    ds: Any,
    parts: dict[str, Any],
    privatizers: dict[str, Privatizer],
    config: PrivatizerConfig,
    *,
    batch_size: int,
    num_proc: int | None,
    release: Any,
) -> Any:
    """``Dataset.map`` (or a stream's lazy map) of each split with its privatizer, in the kind of ``ds``."""
    results: dict[str, Any] = {}
    for name, part in parts.items():
        kwargs: dict[str, Any] = {"batched": True, "with_indices": True, "batch_size": batch_size}
        drop = mapped_drops(privatizers[name])  # the span column (selective.md §3), unless keep_spans=True
        if drop:  # (the user column goes in finish, once the per-user figures are read: users.md §6)
            kwargs["remove_columns"] = drop
        if isinstance(part, datasets.Dataset):
            kwargs["num_proc"] = num_proc
            kwargs["desc"] = f"Privatizing {name or 'rows'} ({config.mechanism}, epsilon={config.epsilon:g})"
        with spawned_workers(config.device, num_proc, release):
            results[name] = part.map(privatizers[name], **kwargs)
    if isinstance(ds, datasets.DatasetDict):
        return datasets.DatasetDict(results)
    if isinstance(ds, datasets.IterableDatasetDict):
        return datasets.IterableDatasetDict(results)
    return next(iter(results.values()))


def _check_unique_ids(ds: datasets.Dataset, id_column: str, split: str) -> None:
    """Refuse an ``id_column`` that holds one id twice anywhere in the split (a :class:`Privatizer` sees one batch
    at a time): two rows with one id share their noise, and comparing their outputs shows where they differ."""
    column = ds.with_format("arrow")[id_column]  # through any indices mapping (select, shuffle)
    if not pa.types.is_integer(column.type) or pc.count_distinct(column, mode="all").as_py() == len(column):
        return  # other types and nulls are refused row by row, with the row named
    ids = column.to_numpy(zero_copy_only=False)
    order = np.argsort(ids, kind="stable")
    first = int(np.flatnonzero(ids[order][1:] == ids[order][:-1])[0])
    a, b = sorted((int(order[first]), int(order[first + 1])))
    where = f" of split {split!r}" if split else ""
    raise repeated_id_error(f"rows {a} and {b}{where}", id_column, int(ids[a]))


def _check_public_inputs(config: PrivatizerConfig, sources: list[Any]) -> None:
    """Refuse a public file (``candidates`` vocab, santext_plus ``frequency_corpus``) that is the input itself
    (space.md §6.1, santext.md §2)."""
    public = [
        ("candidates vocab", config.candidate_spec.vocab),
        ("frequency_corpus", config.options.get("frequency_corpus")),
        ("clip_source", config.options.get("clip_source")),  # dp_mlm's public text for its clip bounds (issue 44)
    ]
    for param, path in public:
        if isinstance(path, (str, os.PathLike)):
            for src in sources:
                check_public(path, src, param=param)
