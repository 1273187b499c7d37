"""The five SentEval classification tasks: where the data live and which protocol scores them.

Each task names the hub dataset users load (``datasets.load_dataset(hub_id)``) and the local JSON
Lines copies this project evaluates on (``shared/data/senteval``, one ``{"text", "label"}`` object a
line, SentEval's label maps). Nothing here downloads anything.

Protocols (Conneau & Kiela 2018, SentEval):

- ``cv``: MR, CR, MPQA. Stratified k-fold cross-validation over all rows (k = 10), the L2 penalty
  chosen by an inner stratified k-fold on each outer training part.
- ``split_dev``: SST-5. Train on train, choose the penalty on dev, score once on test.
- ``split_cv``: TREC-6. Choose the penalty by stratified k-fold CV on train, refit on all of train,
  score once on test.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from .. import settings
from ..errors import InvalidParameterError


__all__ = ["TaskSpec", "TaskData", "TASKS", "Protocol", "senteval_dir", "load_task", "chance_accuracy"]

Protocol = Literal["cv", "split_dev", "split_cv"]
SENTEVAL_DIR_ENV = settings.SENTEVAL_DIR


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """A SentEval task: its local files, its protocol and the hub dataset that holds the same data."""

    name: str
    title: str
    protocol: Protocol
    files: dict[str, str]  # split name -> file name in the SentEval folder
    num_labels: int
    label_counts: dict[str, tuple[int, ...]]  # split -> rows per label 0, 1, …, as in the local files
    hub_id: str | None
    hub_note: str


TASKS: dict[str, TaskSpec] = {
    "mr": TaskSpec(
        name="mr",
        title="MR (movie-review polarity)",
        protocol="cv",
        files={"all": "mr.jsonl"},
        num_labels=2,
        label_counts={"all": (5331, 5331)},
        hub_id="cornell-movie-review-data/rotten_tomatoes",
        hub_note="same 10,662 sentences in a fixed 8,530/1,066/1,066 split; SentEval cross-validates over all",
    ),
    "cr": TaskSpec(
        name="cr",
        title="CR (customer-review polarity)",
        protocol="cv",
        files={"all": "cr.jsonl"},
        num_labels=2,
        label_counts={"all": (1368, 2407)},
        hub_id="SetFit/SentEval-CR",
        hub_note="fixed train/test split of SentEval's tokenised text; SentEval cross-validates over all 3,775",
    ),
    "mpqa": TaskSpec(
        name="mpqa",
        title="MPQA (opinion polarity)",
        protocol="cv",
        files={"all": "mpqa.jsonl"},
        num_labels=2,
        label_counts={"all": (7294, 3312)},
        hub_id="jxm/mpqa",
        hub_note="no canonical hub copy; jxm/mpqa is a community copy (flair's SENTEVAL_MPQA loads SentEval's files)",
    ),
    "sst5": TaskSpec(
        name="sst5",
        title="SST-5 (fine-grained sentiment)",
        protocol="split_dev",
        files={"train": "sst5.train.jsonl", "dev": "sst5.dev.jsonl", "test": "sst5.test.jsonl"},
        num_labels=5,
        label_counts={
            "train": (1092, 2218, 1624, 2322, 1288),
            "dev": (139, 289, 229, 279, 165),
            "test": (279, 633, 389, 510, 399),
        },
        hub_id="SetFit/sst5",
        hub_note="splits train/validation/test = 8,544/1,101/2,210, same label order",
    ),
    "trec": TaskSpec(
        name="trec",
        title="TREC-6 (question type)",
        protocol="split_cv",
        files={"train": "trec.train.jsonl", "test": "trec.test.jsonl"},
        num_labels=6,
        label_counts={"train": (86, 1162, 1250, 1223, 835, 896), "test": (9, 138, 94, 65, 81, 113)},
        hub_id="CogComp/trec",
        hub_note="column coarse_label; the hub swaps labels 1 and 2 (ENTY/DESC) relative to SentEval's map",
    ),
}


def senteval_dir(data_dir: str | os.PathLike[str] | None = None, *, root: Path | None = None) -> Path:
    """The folder that holds the SentEval JSON Lines files.

    Order: the ``senteval_dir`` setting (:mod:`hf_textdp.settings`); then ``data_dir`` (relative paths are
    resolved against ``root``, the repository root, by default the folder above the installed
    package); then ``<root>/../shared/data/senteval``.
    """
    env = settings.senteval_dir()
    if env:
        return Path(env).expanduser()
    base = root if root is not None else Path(__file__).resolve().parents[2]
    if data_dir is not None:
        p = Path(data_dir).expanduser()
        return p if p.is_absolute() else (base / p).resolve()
    return (base.parent / "shared" / "data" / "senteval").resolve()


@dataclass
class TaskData:
    """Texts and labels by split (``all`` for the cross-validated tasks)."""

    spec: TaskSpec
    texts: dict[str, list[str]] = field(default_factory=dict)
    labels: dict[str, np.ndarray] = field(default_factory=dict)
    source_rows: dict[str, np.ndarray] = field(default_factory=dict)  # row numbers in the source files


def _read_jsonl(path: Path) -> tuple[list[str], np.ndarray]:
    if not path.is_file():
        raise InvalidParameterError(
            f"SentEval file {str(path)!r} does not exist; set {SENTEVAL_DIR_ENV} to the folder holding "
            f"{', '.join(sorted({f for t in TASKS.values() for f in t.files.values()}))}."
        )
    texts: list[str] = []
    labels: list[int] = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                texts.append(str(row["text"]))
                labels.append(int(row["label"]))
    return texts, np.asarray(labels, dtype=np.int64)


def _stratified_quota(counts: np.ndarray, n: int) -> np.ndarray:
    """Rows per class in a stratified subsample of size n: shares floored, the remainder to the largest
    fractions. It depends on the class counts only, so :func:`chance_accuracy` can recompute it."""
    quota: np.ndarray = np.floor(counts / counts.sum() * n).astype(int)
    for i in np.argsort(-(counts / counts.sum() * n - quota))[: n - int(quota.sum())]:
        quota[i] += 1
    return quota


def _stratified_subsample(labels: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Row numbers of a stratified random subsample of size n (sorted), class shares kept."""
    if n >= labels.size:
        return np.arange(labels.size)
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    quota = _stratified_quota(counts, n)
    picked = [
        rng.choice(np.flatnonzero(labels == c), size=q, replace=False) for c, q in zip(classes, quota, strict=True)
    ]
    return np.sort(np.concatenate(picked))


def load_task(
    name: str,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    max_rows: int | dict[str, int] | None = None,
    seed: int = 1111,
    root: Path | None = None,
) -> TaskData:
    """Load a task's splits from the local SentEval copies.

    Args:
        name (`str`): one of ``mr``, ``cr``, ``mpqa``, ``sst5``, ``trec``.
        data_dir (`str`, *optional*): see :func:`senteval_dir`.
        max_rows (`int` or `dict[str, int]`, *optional*): a stratified random subsample (seed ``seed``)
            of at most this many rows, per split (a dict maps split names to sizes; an int applies to
            every split). ``None`` keeps every row, the SentEval protocol.
        seed (`int`, defaults to `1111`): SentEval's seed, used for the subsample.

    Raises:
        InvalidParameterError: an unknown task or a missing file.
    """
    if name not in TASKS:
        raise InvalidParameterError(f"Unknown task {name!r}. Known tasks: {sorted(TASKS)}.")
    spec = TASKS[name]
    folder = senteval_dir(data_dir, root=root)
    data = TaskData(spec=spec)
    for split, fname in spec.files.items():
        texts, labels = _read_jsonl(folder / fname)
        limit = max_rows.get(split) if isinstance(max_rows, dict) else max_rows
        rows = np.arange(labels.size) if limit is None else _stratified_subsample(labels, int(limit), seed)
        data.texts[split] = [texts[i] for i in rows]
        data.labels[split] = labels[rows]
        data.source_rows[split] = rows
    return data


def chance_accuracy(task: str, *, protocol: str | None = None, max_rows: int | dict[str, int] | None = None) -> float:
    """Chance level of a task, in %: the accuracy of always predicting the most frequent class of the
    scored labels (all rows for the ``cv`` protocol, the test split otherwise), after the same stratified
    subsample :func:`load_task` draws for ``max_rows``.

    This majority-class rate is never below 1 / number of classes, and above it wherever the classes are
    unbalanced (CR 63.8 % against 50 %, TREC-6 27.6 % against 16.7 %): a classifier under it does worse
    than one that ignores its input. It is computed from :attr:`TaskSpec.label_counts`, so it needs no data.

    Args:
        task (`str`): one of ``mr``, ``cr``, ``mpqa``, ``sst5``, ``trec``.
        protocol (`str`, *optional*): the result's protocol; ``cv`` scores all rows, anything else
            (``split_dev``, ``split_cv``, a fine-tune) the test split. Defaults to the task's protocol.
        max_rows (`int` or `dict[str, int]`, *optional*): the recipe's subsample, as for :func:`load_task`.

    Example:

    >>> round(chance_accuracy("cr"), 1), round(chance_accuracy("trec"), 1)
    (63.8, 27.6)
    >>> round(chance_accuracy("trec", max_rows={"train": 600, "test": 300}), 1)
    27.7

    Raises:
        InvalidParameterError: an unknown task.
    """
    if task not in TASKS:
        raise InvalidParameterError(f"Unknown task {task!r}. Known tasks: {sorted(TASKS)}.")
    spec = TASKS[task]
    split = "all" if (protocol or spec.protocol) == "cv" else "test"
    counts = np.asarray(spec.label_counts[split])
    limit = max_rows.get(split) if isinstance(max_rows, dict) else max_rows
    if limit is not None and limit < counts.sum():
        counts = _stratified_quota(counts, int(limit))
    return 100.0 * float(counts.max()) / float(counts.sum())
