"""Streaming outputs: write a privatized ``IterableDataset`` shard by shard, resumably.

``privatize_dataset(..., streaming=True, output_dir=OUTPUT)`` (CLI ``--streaming``) maps the stream with a
:class:`~hf_textdp.Privatizer` and hands it to :func:`save_streaming`. Rows are written as they come, in
shards of ``shard_size`` rows, into the same hidden work folder as a sharded in-memory run::

    .OUTPUT.partial/
        manifest.json              what the job is (hf_textdp/stream/v2): hashes of the config and of the
                                   embedding space, the columns, whether a seed is used (never the seed), and
                                   each finished shard's rows, SHA-256 and the stream's position after it
                                   (``IterableDataset.state_dict()``: shard and row counters, no data); sealed
        lock                       held by the running process; the kernel drops it when the process dies
        split-000/shard-00000.arrow, shard-00001.arrow, ...

When the stream is exhausted, the shards are read back (memory-mapped) and written to ``OUTPUT`` in its
format (.jsonl, .csv, .parquet, else a ``save_to_disk`` folder) by the same ``save_output`` as an in-memory
run, with the privacy report computed from the written rows, and renamed into place; then the work folder is
removed. Memory stays O(shard): the stream is never held whole.

**Row ids.** ``IterableDataset.map(..., with_indices=True)`` numbers the rows it sees from 0, in stream order,
and ``load_state_dict`` restores that counter, so for a single process reading the stream from its start the
index of a row is its index in the source, the same as ``Dataset.map`` gives, and a seeded streaming output
equals the in-memory one row for row (docs/mechanisms/randomness.md; testing.md §5). The counter restarts at 0 in each
``DataLoader`` worker and after ``skip``, ``shuffle`` or ``split_dataset_by_node``: there, pass ``id_column=`` (an int
column holding each row's index in the source) so every row keeps its own id.

**Resume.** After a crash, ``resume=True`` (``--resume``) loads the stream position of the last finished
shard and continues from there: every row is written exactly once. Only the shards whose files still have the
SHA-256 the sealed manifest records are kept (:mod:`hf_textdp.io.integrity`): the stream restarts after the last
of them, so a changed, swapped or foreign shard is computed again (the same bytes, for a seeded run). The seed is
not stored: its salted scrypt verifier refuses another seed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
from datasets.utils import tqdm as hf_tqdm

from ..accounting import Totals
from ..errors import InvalidParameterError, ParameterTypeError
from ..io.outputs import refuse_existing_output, save_output
from ..io.paths import FILE_FORMATS, MANIFEST_NAME, output_path, work_dir_for
from ..io.workdir import (
    DEFAULT_SHARD_SIZE,
    WorkFolderRun,
    atomic_write_arrow,
    manifest_mismatch,
    privatizer_manifest,
    read_json_object,
    shard_path,
)
from ..privatizer import Privatizer
from ..utils.logging import get_logger
from ..validation import check_bool, check_int
from .prefetch import ahead
from .totals import totals_from_dataset
from .users import finish, user_totals


__all__ = ["save_streaming", "STREAM_MANIFEST_FORMAT"]

logger = get_logger("hf_textdp.streaming")  # the name its log lines have always carried (issue 38 moved the module)

STREAM_MANIFEST_FORMAT = "hf_textdp/stream/v2"  # v2: sealed, with each shard's SHA-256 and position (issue 53)


def save_streaming(
    ds: Any,
    output: str | os.PathLike[str],
    privatizers: dict[str, Privatizer],
    *,
    resume: bool = False,
    overwrite: bool = False,
    shard_size: int = DEFAULT_SHARD_SIZE,
) -> dict[str, Any]:
    """Write a privatized ``IterableDataset`` (or ``IterableDatasetDict``) to ``output`` shard by shard.

    Args:
        ds (`IterableDataset` or `IterableDatasetDict`): the stream, already mapped with the privatizers.
        output (`str` or `os.PathLike`): a .jsonl/.json/.csv/.parquet file, else a ``save_to_disk`` folder.
        privatizers (`dict[str, Privatizer]`): split name to the privatizer that maps it (one entry for an
            ``IterableDataset``); they give the report and the manifest.
        resume (`bool`, defaults to `False`): continue the partial run found in ``.OUTPUT.partial``.
        overwrite (`bool`, defaults to `False`): replace an existing output and discard a partial run.
        shard_size (`int`, defaults to `10000`): rows per shard, the unit of ``resume`` (outputs do not
            depend on it).

    Returns:
        `dict`: the privacy report written beside the output (accounting.md §4).

    Raises:
        OutputExistsError: the output exists, or a partial run exists, and neither ``overwrite`` nor
            ``resume`` says what to do; or another process holds the work folder's lock.
        ResumeError: the partial run was made with another config, model, columns or output format.

    Example:

    >>> stream = load_dataset("json", data_files="big.jsonl", split="train", streaming=True)  # doctest: +SKIP
    >>> priv = Privatizer(PrivatizerConfig(epsilon=10.0), seed=seed)                         # doctest: +SKIP
    >>> out = stream.map(priv, batched=True, with_indices=True)                               # doctest: +SKIP
    >>> save_streaming(out, "big.private.parquet", {"": priv})["totals"]["rows"]              # doctest: +SKIP
    1000000
    """
    out_path = output_path(output, "output")
    check_bool(resume, "resume")
    check_bool(overwrite, "overwrite")
    check_int(shard_size, "shard_size", minimum=1)
    if not isinstance(privatizers, dict) or not privatizers:
        raise ParameterTypeError("privatizers must be a non-empty dict of split name -> Privatizer.")
    for priv in privatizers.values():
        if not isinstance(priv, Privatizer):
            raise ParameterTypeError(f"privatizers values must be Privatizer objects, got {type(priv).__name__}.")
    if isinstance(ds, datasets.IterableDatasetDict):
        if out_path.suffix.lower() in FILE_FORMATS:
            raise InvalidParameterError(
                f"output {str(out_path)!r}: a dataset with splits {sorted(ds)} needs a folder output (no extension) "
                "or split=."
            )
        parts: dict[str, Any] = dict(ds.items())
        missing = sorted(set(parts) - set(privatizers))
        if missing:
            raise InvalidParameterError(
                f"privatizers has no entry for split(s) {missing}; it has {sorted(privatizers)}."
            )
        is_dict = True
    elif isinstance(ds, datasets.IterableDataset):
        parts = {next(iter(privatizers)): ds}
        is_dict = False
    else:
        raise ParameterTypeError(f"ds must be an IterableDataset or IterableDatasetDict, got {type(ds).__name__}.")

    run = _StreamRun(parts, privatizers, out_path, is_dict=is_dict, shard_size=shard_size)
    report: dict[str, Any] = run.execute(resume=resume, overwrite=overwrite)
    totals = report["totals"]
    logger.info(
        "privatized %d streamed rows (%s, epsilon=%s per token) into %s",
        totals["rows"],
        report["mechanism"],
        report["epsilon"],
        out_path,
    )
    return report


def _index(rel: str) -> int:
    """k of a shard's path ``split-NNN/shard-k.arrow``."""
    return int(rel.rsplit("shard-", 1)[1].split(".", 1)[0])


class _StreamRun(WorkFolderRun):
    """One :func:`save_streaming` call: the work folder, its manifest, the shards and the assembly."""

    def __init__(
        self,
        parts: dict[str, Any],
        privatizers: dict[str, Privatizer],
        output: Path,
        *,
        is_dict: bool,
        shard_size: int,
    ) -> None:
        self.parts = parts
        self.privatizers = {name: privatizers[name] for name in parts}
        self.output = output
        self.work = work_dir_for(output)
        self.is_dict = is_dict
        self.shard_size = shard_size
        self.folders = {name: f"split-{i:03d}" for i, name in enumerate(parts)}
        first = next(iter(self.privatizers.values()))
        self.seed = first.seed
        # postprocess="vector" releases no input_ids to count token classes from: its report counts what the
        # privatizers saw in this process, so such a run cannot be continued by another process.
        self.resumable = first.config.postprocess != "vector"
        self._run_totals: dict[str, Totals] = {}

    # ---------------------------------------------------------------- the manifest
    def manifest(self) -> dict[str, Any]:
        """What this run is: the privatizer (:func:`privatizer_manifest`), the output format and the splits."""
        return privatizer_manifest(STREAM_MANIFEST_FORMAT, next(iter(self.privatizers.values()))) | {
            "output_format": FILE_FORMATS.get(self.output.suffix.lower(), "save_to_disk"),
            "splits": [{"name": name, "folder": folder} for name, folder in self.folders.items()],
        }

    @staticmethod
    def mismatch(old: dict[str, Any], new: dict[str, Any]) -> str | None:
        return manifest_mismatch(
            old,
            new,
            format_reason="it is not a streaming run (or was written in another work-folder format)",
            own_reasons={
                "output_format": f"it wrote {old.get('output_format')!r}, this run writes {new['output_format']!r}"
            },
        )

    def finished(self) -> int:
        """The shards the manifest records (verified only when the run resumes from them)."""
        manifest = self._ledger.manifest if self._ledger is not None else read_json_object(self.work / MANIFEST_NAME)
        shards = (manifest or {}).get("shards")
        return len(shards) if isinstance(shards, dict) and self.work.is_dir() else 0

    # ---------------------------------------------------------------- the work folder
    def open(self, *, resume: bool, overwrite: bool) -> None:
        """Create or take over the locked work folder, after checking the output and any partial run."""
        if overwrite or not (resume and (self.work / MANIFEST_NAME).is_file()):
            refuse_existing_output(self.output, resume=resume, overwrite=overwrite)
        super().open(resume=resume, overwrite=overwrite)

    def refusal(self, old: dict[str, Any]) -> str | None:
        if not self.resumable and self.finished():
            return "postprocess='vector' streaming runs cannot be resumed (their report counts this process)"
        return super().refusal(old)

    def _progress(self, name: str) -> dict[str, Any]:
        """Where split ``name`` resumes: after the longest run of recorded shards from the first whose files
        verify (:meth:`~hf_textdp.io.integrity.ShardLedger.verified`); the records after it are dropped."""
        folder, ledger = self.folders[name], self.ledger
        k, rows, state = 0, 0, None
        while (rec := ledger.shards.get(self._rel(name, k))) is not None and ledger.verified(self._rel(name, k)):
            k, rows, state = k + 1, rows + int(rec["rows"]), rec.get("state")
        stale = [rel for rel in ledger.shards if rel.startswith(folder + "/shard-") and _index(rel) >= k]
        done = folder in ledger.manifest.get("done", [])
        if stale:
            ledger.manifest["done"] = [f for f in ledger.manifest.get("done", []) if f != folder]
            ledger.forget(stale)
            done = False
        return {"shards": k, "rows": rows, "state": state, "done": done}

    def _rel(self, name: str, k: int) -> str:
        return self._shard_path(name, k).relative_to(self.work).as_posix()

    def _shard_path(self, name: str, k: int) -> Path:
        return shard_path(self.work, self.folders[name], k)

    # ---------------------------------------------------------------- the work
    def compute(self) -> None:
        """Stream every split from its saved position; write a shard, then the position after it."""
        for name, part in self.parts.items():
            progress = self._progress(name)
            if progress["done"]:
                continue
            priv = self.privatizers[name]
            before, priv.totals = priv.totals, Totals()  # count this run's rows apart (vector reports)
            try:
                progress = self._stream(name, part, progress)
                self._run_totals[name] = priv.totals
            finally:
                before.merge(priv.totals)
                priv.totals = before
            logger.info(
                "%s: split %r: %d rows in %d shard(s)", self.output, name, progress["rows"], progress["shards"]
            )

    def _stream(self, name: str, part: Any, progress: dict[str, Any]) -> dict[str, Any]:
        # Python batches: datasets' arrow iteration over a Python map converts the outputs one row at a time,
        # several times slower than one conversion per shard (with the types Dataset.map would infer).
        stream = part.with_format(None)
        if progress["state"] is not None:
            stream.load_state_dict(progress["state"])

        def batches() -> Iterator[tuple[dict[str, list[Any]], dict[str, Any]]]:
            for batch in stream.iter(batch_size=self.shard_size):
                yield batch, stream.state_dict()  # the position after this batch, taken before the next is read

        with hf_tqdm(desc=f"Privatizing {name or 'rows'} (streaming)", unit=" rows", initial=progress["rows"]) as bar:
            # the next shard is privatized (kernels and tokenizer release the GIL) while this one is written
            for batch, state in ahead(batches()):
                table = datasets.Dataset.from_dict(batch).data.table
                k = progress["shards"]
                # no schema metadata: only the columns go to disk
                atomic_write_arrow(self._shard_path(name, k), table.replace_schema_metadata(None))
                self.ledger.record(self._rel(name, k), table.num_rows, state=state)
                progress = {"shards": k + 1, "rows": progress["rows"] + table.num_rows, "state": state}
                bar.update(table.num_rows)
        self.ledger.manifest["done"] = [*self.ledger.manifest.get("done", []), self.folders[name]]
        self.ledger.write()
        return progress | {"done": True}

    def _load(self, name: str) -> Any:
        n = sum(1 for rel in self.ledger.shards if rel.startswith(self.folders[name] + "/"))
        shards = [datasets.Dataset.from_file(str(self._shard_path(name, k))) for k in range(n)]
        if not shards:
            return datasets.Dataset.from_dict({})
        return shards[0] if len(shards) == 1 else datasets.concatenate_datasets(shards)

    def assemble(self) -> dict[str, Any]:
        """Write the output and its report (from the written rows) atomically; return the report."""
        loaded = {name: self._load(name) for name in self.parts}
        users = user_totals(loaded, self.privatizers)  # per-user figures, then the finished output (users.md §6)
        loaded = {name: finish(part, self.privatizers[name]) for name, part in loaded.items()}
        totals = Totals()
        for name, part in loaded.items():
            priv = self.privatizers[name]
            if "input_ids" in part.column_names or part.num_rows == 0:
                totals.merge(totals_from_dataset(priv.engine.space, part))
            else:  # postprocess="vector": the classes this process counted (the run was not resumed)
                totals.merge(self._run_totals.get(name, Totals()))
        first = next(iter(self.privatizers.values()))
        report = first.engine.build_report(totals, users=users)
        out: Any = datasets.DatasetDict(loaded) if self.is_dict else loaded[next(iter(self.parts))]
        save_output(out, self.output, report, tmp_root=self.work)
        return report
