"""The in-memory sharded writer behind ``privatize_dataset(..., output_dir=...)`` (shards, work folder and
resume: see :mod:`hf_textdp.run.pipeline`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
from datasets.utils import tqdm as hf_tqdm

from ..config import PrivatizerConfig
from ..io.outputs import save_output
from ..io.paths import FILE_FORMATS, work_dir_for
from ..io.workdir import (
    WorkFolderRun,
    atomic_write_arrow,
    manifest_mismatch,
    privatizer_manifest,
    sha256_json,
    shard_path,
)
from ..privatizer import Privatizer
from ..utils.logging import get_logger
from .totals import dataset_report
from .users import finish, mapped_drops, user_totals


__all__ = ["ShardedRun"]

logger = get_logger("hf_textdp.pipeline")  # the logger these lines have always used

MANIFEST_FORMAT = "hf_textdp/shards/v2"  # v2: sealed, with each shard's SHA-256 (issue 53)
_CARD_FIELDS = ("description", "citation", "homepage", "license")


class _Shifted:
    """``Privatizer.__call__`` with the shard's first row added to ``datasets``' 0-based indices.

    Row r of a split keeps row id r whatever shard it falls in, so its noise (docs/mechanisms/randomness.md) is the
    same as in a single ``Dataset.map``. Picklable for ``num_proc`` workers; hashes as the privatizer plus the offset.
    """

    def __init__(self, priv: Privatizer, offset: int) -> None:
        self.priv = priv
        self.offset = offset

    def __call__(self, batch: dict[str, list[Any]], indices: Sequence[int]) -> dict[str, list[Any]]:
        return self.priv(batch, [self.offset + int(i) for i in indices])


def _rows(data: Any, a: int, b: int) -> Any:
    return data if (a, b) == (0, len(data)) else data.select(range(a, b))


def _privatized_table(
    priv: Privatizer, data: Any, offset: int, batch_size: int, num_proc: int | None, desc: str
) -> Any:
    """The Arrow table of ``data`` (rows ``offset``, ``offset + 1``, ... of its split) privatized by ``priv``."""
    res = data.map(
        _Shifted(priv, offset),
        batched=True,
        with_indices=True,
        batch_size=batch_size,
        num_proc=num_proc,
        keep_in_memory=True,  # the shard file is the only copy; nothing goes to the datasets cache
        load_from_cache_file=False,
        desc=desc,
        remove_columns=mapped_drops(priv) or None,  # the span column unless keep_spans=True (the user column: finish)
    )
    if len(res) != len(data):  # pragma: no cover - an invariant of Dataset.map
        raise RuntimeError(f"rows {offset}-: {len(res)} rows out for {len(data)} in.")
    if getattr(res, "_indices", None) is not None:
        res = res.flatten_indices(keep_in_memory=True)
    # The map's schema metadata carries its in-process fingerprint, a hash of the seeded privatizer:
    # keep only the features.
    return res.data.table.replace_schema_metadata(res.features.arrow_schema.metadata)


#: in a worker of the shard pool: the run's privatizers by split folder, unpickled once per worker
_worker_privatizers: dict[str, Privatizer] = {}


def _init_worker(privatizers: dict[str, Privatizer]) -> None:
    datasets.disable_progress_bars()  # the parent's bar counts the shards' rows
    _worker_privatizers.clear()
    _worker_privatizers.update(privatizers)


def _write_shard(task: tuple[str, Any, int, str, int]) -> tuple[str, int]:
    """A pool worker's shard: privatize its rows and write the shard file atomically; returns (its path, rows)."""
    folder, data, offset, path, batch_size = task
    atomic_write_arrow(path, _privatized_table(_worker_privatizers[folder], data, offset, batch_size, None, ""))
    return path, len(data)


@dataclass
class _Split:
    name: str
    data: Any  # datasets.Dataset
    priv: Privatizer
    folder: str

    def ranges(self, shard_size: int) -> list[tuple[int, int]]:
        n = len(self.data)
        return [(a, min(a + shard_size, n)) for a in range(0, n, shard_size)] or [(0, 0)]


class ShardedRun(WorkFolderRun):
    """One ``privatize_dataset(..., output_dir=...)`` call over in-memory or memory-mapped splits."""

    def __init__(
        self,
        parts: dict[str, Any],
        privatizers: dict[str, Privatizer],
        output: Path,
        config: PrivatizerConfig,
        *,
        is_dict: bool,
        shard_size: int,
        batch_size: int,
        num_proc: int | None,
    ) -> None:
        self.splits = [
            _Split(name, part, privatizers[name], f"split-{i:03d}") for i, (name, part) in enumerate(parts.items())
        ]
        self.output = output
        self.work = work_dir_for(output)
        self.config = config
        self.is_dict = is_dict
        self.shard_size = shard_size
        self.batch_size = batch_size
        self.num_proc = num_proc
        self.seed = self.splits[0].priv.seed

    # ---------------------------------------------------------------- the manifest
    def manifest(self) -> dict[str, Any]:
        """What this run is: the privatizer (:func:`privatizer_manifest`), the shard size and the input."""
        inputs = [
            {
                "split": s.name,
                "rows": len(s.data),
                "columns": s.data.column_names,
                "fingerprint": getattr(s.data, "_fingerprint", None),
            }
            for s in self.splits
        ]
        return privatizer_manifest(MANIFEST_FORMAT, self.splits[0].priv) | {
            "shard_size": self.shard_size,
            "input_sha256": sha256_json(inputs),
            "splits": [
                {"name": s.name, "folder": s.folder, "rows": len(s.data), "shards": len(s.ranges(self.shard_size))}
                for s in self.splits
            ],
        }

    @staticmethod
    def mismatch(old: dict[str, Any], new: dict[str, Any]) -> str | None:
        return manifest_mismatch(
            old,
            new,
            format_reason="it was written in another work-folder format",
            own_reasons={
                "shard_size": f"its shard_size was {old.get('shard_size')!r}, this run's is {new['shard_size']!r}",
                "input_sha256": "its input differs from this run's (rows, columns, files or splits)",
            },
        )

    def _shard_path(self, split: _Split, k: int) -> Path:
        return shard_path(self.work, split.folder, k)

    def _record(self, path: Path | str, rows: int) -> None:
        """Record a shard just written in the sealed manifest (its SHA-256), so a resume can trust it."""
        self.ledger.record(Path(path).relative_to(self.work).as_posix(), rows)

    def finished(self) -> int:
        return sum(1 for _ in self.work.glob("split-*/shard-*.arrow")) if self.work.is_dir() else 0

    # ---------------------------------------------------------------- the work
    def compute(self) -> None:
        """Privatize every shard that is not finished yet, writing each atomically.

        With ``num_proc`` workers and at least as many shards to write, one pool of workers privatizes whole
        shards (each worker writes its own), so the workers start once per run instead of once per shard
        (on a GPU, spawned workers take seconds to start). Fewer shards than workers are each split among
        the workers by ``Dataset.map``. Either way a shard's rows are those of one ``Dataset.map``. A shard of a
        resumed run is reused only when its file has the SHA-256 its sealed manifest records
        (:meth:`~hf_textdp.io.integrity.ShardLedger.verified`); any other file there is computed again.
        """
        pending: list[tuple[_Split, int, int, int, int]] = []
        reused = 0
        for split in self.splits:
            ranges = split.ranges(self.shard_size)
            for k, (a, b) in enumerate(ranges):
                rel = self._shard_path(split, k).relative_to(self.work).as_posix()
                if self.ledger.verified(rel, b - a):
                    reused += 1
                else:
                    pending.append((split, k, a, b, len(ranges)))
        if self.num_proc and self.num_proc > 1 and len(pending) >= self.num_proc:
            self._compute_in_pool(pending)
        else:
            for split, k, a, b, n in pending:
                atomic_write_arrow(self._shard_path(split, k), self._privatize(split, a, b, k, n))
                self._record(self._shard_path(split, k), b - a)
        logger.info("%s: %d shard(s) privatized, %d reused", self.output, len(pending), reused)

    def _compute_in_pool(self, pending: list[tuple[_Split, int, int, int, int]]) -> None:
        import multiprocess

        assert self.num_proc is not None
        privatizers = {s.folder: s.priv for s in self.splits}
        tasks = [
            (s.folder, _rows(s.data, a, b), a, str(self._shard_path(s, k)), self.batch_size)
            for s, k, a, b, _ in pending
        ]
        total = sum(b - a for _, _, a, b, _ in pending)
        desc = f"Privatizing {len(pending)} shards ({self.config.mechanism}, epsilon={self.config.epsilon:g})"
        workers = min(self.num_proc, len(pending))
        with (
            multiprocess.Pool(workers, initializer=_init_worker, initargs=(privatizers,)) as pool,
            hf_tqdm(total=total, desc=desc, unit=" examples") as bar,
        ):
            for path, rows in pool.imap_unordered(_write_shard, tasks):
                self._record(path, rows)
                bar.update(rows)

    def _privatize(self, split: _Split, a: int, b: int, k: int, n_shards: int) -> Any:
        label = split.name or "rows"
        return _privatized_table(
            split.priv,
            _rows(split.data, a, b),
            a,
            self.batch_size,
            self.num_proc if self.num_proc and b - a > 1 else None,
            f"Privatizing {label} shard {k + 1}/{n_shards} ({self.config.mechanism}, epsilon={self.config.epsilon:g})",
        )

    def _load(self, *, in_memory: bool) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for split in self.splits:
            shards = [
                datasets.Dataset.from_file(str(self._shard_path(split, k)), in_memory=in_memory)
                for k in range(len(split.ranges(self.shard_size)))
            ]
            ds = shards[0] if len(shards) == 1 else datasets.concatenate_datasets(shards)
            for key in _CARD_FIELDS:  # the input's card fields (never row text) carry over
                setattr(ds.info, key, getattr(split.data.info, key, None) or getattr(ds.info, key))
            out[split.name] = ds
        return out

    def assemble(self) -> tuple[Any, dict[str, Any]]:
        """Write the output and its report atomically; return (the dataset to hand back, the report)."""
        privatizers = {s.name: s.priv for s in self.splits}
        parts = self._load(in_memory=False)
        users = user_totals(parts, privatizers)  # per-user figures, then the finished output (users.md §6)
        parts = {name: finish(part, privatizers[name]) for name, part in parts.items()}
        out: Any = datasets.DatasetDict(parts) if self.is_dict else parts[self.splits[0].name]
        report = dataset_report(out, privatizers, {s.name: s.data for s in self.splits}, users=users)
        save_output(out, self.output, report, tmp_root=self.work)
        if FILE_FORMATS.get(self.output.suffix.lower()) is None:
            return datasets.load_from_disk(str(self.output)), report
        # A file output cannot be memory-mapped back with its types (CSV has no lists): hand back the
        # shards, read into memory before the work folder goes.
        mem = {name: finish(part, privatizers[name]) for name, part in self._load(in_memory=True).items()}
        return (datasets.DatasetDict(mem) if self.is_dict else mem[self.splits[0].name]), report
