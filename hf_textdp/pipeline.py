"""``privatize_dataset``: load, map with a :class:`Privatizer`, save atomically with the report.

A saved output is the data (a .jsonl/.csv/.parquet file or a ``save_to_disk`` folder) plus its
privacy report (``OUTPUT.privacy_report.json`` beside a file, ``privacy_report.json`` inside a
folder). Writes go to a temporary sibling that is renamed into place, so an interrupted run leaves
either no output or a complete one. A saved dataset gets a fresh random fingerprint: the in-process
fingerprint is derived from the seed and must not be published (spec §10.5).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from .accounting import Totals
from .config import PrivatizerConfig
from .errors import ColumnNotFoundError, InvalidParameterError, OutputExistsError, ParameterTypeError
from .privatizer import Privatizer
from .space import STRUCTURAL, EmbeddingSpace
from .utils.io import atomic_path, atomic_write_text, dumps_json
from .utils.logging import get_logger


__all__ = ["privatize_dataset", "report_path_for", "load_source", "save_output", "FILE_FORMATS"]

logger = get_logger(__name__)

FILE_FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
REPORT_NAME = "privacy_report.json"


def report_path_for(output: str | os.PathLike[str]) -> Path:
    """Where the report of a saved output lives."""
    output = Path(output)
    if output.suffix.lower() in FILE_FORMATS:
        return output.with_name(output.name + ".privacy_report.json")
    return output / REPORT_NAME


# --------------------------------------------------------------------------- loading
def load_source(source: Any, *, split: str | None = None, streaming: bool = False) -> Any:
    """Load ``source`` (Dataset, DatasetDict, IterableDataset, file, folder or hub id)."""
    import datasets

    if isinstance(source, (datasets.Dataset, datasets.DatasetDict, datasets.IterableDataset,
                           datasets.IterableDatasetDict)):
        ds = source
    elif isinstance(source, (str, os.PathLike)):
        p = Path(source).expanduser()
        if p.is_file():
            fmt = FILE_FORMATS.get(p.suffix.lower())
            if fmt is None:
                raise InvalidParameterError(
                    f"source={str(source)!r}: unsupported file type {p.suffix!r}; allowed: {sorted(FILE_FORMATS)}."
                )
            ds = datasets.load_dataset(fmt, data_files=str(p), split="train", streaming=streaming)
        elif p.is_dir():
            if (p / "dataset_dict.json").is_file() or (p / "state.json").is_file():
                ds = datasets.load_from_disk(str(p))
                if streaming:
                    ds = ds.to_iterable_dataset() if isinstance(ds, datasets.Dataset) else datasets.IterableDatasetDict(
                        {k: v.to_iterable_dataset() for k, v in ds.items()})
            else:
                ds = datasets.load_dataset(str(p), streaming=streaming)
        else:
            try:
                ds = datasets.load_dataset(str(source), streaming=streaming)
            except Exception as err:  # noqa: BLE001
                raise InvalidParameterError(
                    f"source={str(source)!r} is not an existing file or folder, and could not be loaded as a hub "
                    f"dataset offline ({type(err).__name__}: {str(err)[:200]})."
                ) from err
    else:
        raise ParameterTypeError(
            "source must be a Dataset, DatasetDict, IterableDataset, a path or a hub id, "
            f"got {type(source).__name__}."
        )
    if split is not None and isinstance(ds, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        if split not in ds:
            raise InvalidParameterError(f"split={split!r} is not in the dataset. Available splits: {sorted(ds)}.")
        ds = ds[split]
    return ds


def _columns(ds: Any) -> list[str]:
    cols = getattr(ds, "column_names", None)
    if cols is None and getattr(ds, "features", None) is not None:
        cols = list(ds.features)
    return list(cols or [])


# --------------------------------------------------------------------------- totals from outputs
def totals_from_columns(space: EmbeddingSpace, batches: Iterable[dict[str, list[Any]]], epsilon_token: Any) -> Totals:
    """Recompute the report totals from released columns (works after num_proc or a cache hit)."""
    totals = Totals()
    pad = space.pad_id
    for batch in batches:
        eps_col = batch.get("dp_epsilon")
        delta_col = batch.get("dp_delta")
        for j, (ids, n) in enumerate(zip(batch["input_ids"], batch["dp_tokens"])):
            arr = np.asarray(ids, dtype=np.int64)
            cls, _ = space.classify(arr)
            structural = cls == STRUCTURAL
            padding = int((arr[structural] == pad).sum()) if pad is not None else 0
            totals.add_row(
                dp_tokens=int(n),
                special=int(structural.sum()) - padding,
                padding=padding,
                passthrough=int(arr.size - structural.sum() - int(n)),
                epsilon=None if eps_col is None else eps_col[j],
                delta=None if delta_col is None else delta_col[j],
            )
    return totals


# --------------------------------------------------------------------------- saving
def _check_output(output: Path, source: Any, overwrite: bool) -> None:
    if isinstance(source, (str, os.PathLike)):
        src = Path(source).expanduser()
        if src.exists() and src.resolve() == output.resolve():
            raise OutputExistsError(f"output {str(output)!r} is the input itself; refusing to overwrite the input.")
    if output.exists() and not overwrite:
        raise OutputExistsError(f"output {str(output)!r} already exists; pass overwrite=True (--overwrite) to replace it.")


def save_output(ds: Any, output: Path, report: dict[str, Any]) -> None:
    """Write ``ds`` to ``output`` (format from the extension, else a ``save_to_disk`` folder) atomically."""
    import datasets

    fmt = FILE_FORMATS.get(output.suffix.lower())
    if fmt is not None:
        if isinstance(ds, datasets.DatasetDict):
            raise InvalidParameterError(
                f"output {str(output)!r}: a DatasetDict with splits {sorted(ds)} needs a folder output (no extension) "
                "or split=."
            )
        with atomic_path(output, is_dir=False) as tmp:
            if fmt == "json":
                ds.to_json(str(tmp), lines=True, force_ascii=False)
            elif fmt == "csv":
                ds.to_csv(str(tmp), index=False)
            else:
                ds.to_parquet(str(tmp))
        atomic_write_text(report_path_for(output), dumps_json(report))
        return
    # The in-process fingerprint is derived from the (secret) seed: publish a random one instead.
    if isinstance(ds, datasets.DatasetDict):
        ds = datasets.DatasetDict({k: _refingerprint(v) for k, v in ds.items()})
    else:
        ds = _refingerprint(ds)
    with atomic_path(output, is_dir=True) as tmp:
        ds.save_to_disk(str(tmp))
        atomic_write_text(tmp / REPORT_NAME, dumps_json(report))


def _refingerprint(ds: Any) -> Any:
    ds = ds.flatten_indices() if getattr(ds, "_indices", None) is not None else ds
    ds._fingerprint = secrets.token_hex(16)
    return ds


# --------------------------------------------------------------------------- the pipeline
def privatize_dataset(
    source: Any,
    config: PrivatizerConfig,
    *,
    text_column: str = "text",
    split: str | None = None,
    num_proc: int | None = None,
    seed: int | None = None,
    id_column: str | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    streaming: bool = False,
    resume: bool = False,
    overwrite: bool = False,
    batch_size: int = 1000,
) -> Any:
    """Privatize the ``text_column`` of a dataset; optionally save it with its privacy report.

    Args:
        source: a ``Dataset``, ``DatasetDict``, ``IterableDataset``, hub id, local dataset folder, or a
            .jsonl/.csv/.parquet file.
        config (`PrivatizerConfig`): what to privatize with.
        text_column (`str`, defaults to `"text"`): the column to privatize.
        split (`str`, *optional*): select one split of a ``DatasetDict``; also the noise key.
        num_proc (`int`, *optional*): worker processes for ``Dataset.map``.
        seed (`int`, *optional*): secret key for reproducible noise (never saved; ≥ 64 random bits).
        id_column (`str`, *optional*): int column used as the row id instead of the index.
        output_dir (`str`, *optional*): where to save (file by extension, else a folder).
        streaming (`bool`, defaults to `False`): stream the source (``IterableDataset``).
        resume (`bool`, defaults to `False`): continue a sharded output (see the CLI's ``--resume``).
        overwrite (`bool`, defaults to `False`): replace an existing output.
        batch_size (`int`, defaults to `1000`): rows per ``map`` batch (outputs do not depend on it).

    Returns:
        The same kind as ``source`` (a file or path source gives a ``Dataset``), with the text replaced
        and the columns ``input_ids``, ``attention_mask``, ``dp_tokens``, ``dp_epsilon`` (``dp_delta``).
        The report is available as ``hf_textdp.privacy_report(output_dir)`` or in ``ds.info.description``
        is left untouched.
    """
    import datasets

    if not isinstance(config, PrivatizerConfig):
        raise ParameterTypeError(f"config must be a PrivatizerConfig, got {type(config).__name__}.")
    if num_proc is not None and (isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1):
        raise InvalidParameterError(f"num_proc must be an int >= 1 or None, got {num_proc!r}.")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidParameterError(f"batch_size must be an int >= 1, got {batch_size!r}.")
    output = Path(output_dir).expanduser() if output_dir is not None else None
    if output is not None and not resume:
        _check_output(output, source, overwrite)
    ds = load_source(source, split=split, streaming=streaming)
    is_dict = isinstance(ds, (datasets.DatasetDict, datasets.IterableDatasetDict))
    parts = dict(ds.items()) if is_dict else {split or "": ds}
    results: dict[str, Any] = {}
    privatizers: dict[str, Privatizer] = {}
    for name, part in parts.items():
        cols = _columns(part)
        if cols and text_column not in cols:
            raise ColumnNotFoundError(
                f"text_column={text_column!r} is not in the dataset. Current columns in the dataset: {cols}."
            )
        if id_column is not None and cols and id_column not in cols:
            raise ColumnNotFoundError(
                f"id_column={id_column!r} is not in the dataset. Current columns in the dataset: {cols}."
            )
        priv = Privatizer(config, seed=seed, text_column=text_column, id_column=id_column, split=name)
        privatizers[name] = priv
        kwargs: dict[str, Any] = {"batched": True, "with_indices": True, "batch_size": batch_size}
        if isinstance(part, datasets.Dataset):
            kwargs["num_proc"] = num_proc
            kwargs["desc"] = f"Privatizing {name or 'rows'} ({config.mechanism}, epsilon={config.epsilon:g})"
        results[name] = part.map(priv, **kwargs)
    out: Any
    if is_dict:
        out = (datasets.DatasetDict if isinstance(ds, datasets.DatasetDict) else datasets.IterableDatasetDict)(results)
    else:
        out = results[split or ""]
    if output is not None:
        if isinstance(out, (datasets.IterableDataset, datasets.IterableDatasetDict)):
            from .streaming import save_streaming

            save_streaming(out, output, privatizers, resume=resume, overwrite=overwrite)
            return out
        report = dataset_report(out, privatizers)
        save_output(out, output, report)
        logger.info(
            "privatized %d rows (%s, epsilon=%g per token) into %s",
            report["totals"]["rows"], config.mechanism, config.epsilon, output,
        )
    return out


def dataset_report(ds: Any, privatizers: dict[str, Privatizer]) -> dict[str, Any]:
    """The report of a privatized Dataset/DatasetDict, totals recomputed from its columns."""
    import datasets

    parts = dict(ds.items()) if isinstance(ds, datasets.DatasetDict) else {next(iter(privatizers)): ds}
    totals = Totals()
    priv = next(iter(privatizers.values()))
    for name, part in parts.items():
        p = privatizers.get(name, priv)
        cols = [c for c in ("input_ids", "dp_tokens", "dp_epsilon", "dp_delta") if c in part.column_names]
        batches = part.select_columns(cols).iter(batch_size=1000)
        totals.merge(totals_from_columns(p.space, batches, p.claim.epsilon_token))
    return priv.build_report(totals)
