"""Fine-tuning recipe: privatize the inputs, train a small classifier head on MiniLM features.

For every privatizer of a ``finetune`` recipe, the training text of one task is privatized; a small
MLP head is trained on the frozen transformer's mean-pooled features and scored on clean test text
(``train_only``) and on privatized test text (``train_and_test``), beside a clean baseline.
With ``postprocess: vector`` nothing is decoded to tokens: the noisy vectors are fed to the model as
``inputs_embeds`` (the model adds its own position embeddings and LayerNorm), the way
``DataCollatorForInputsEmbeds`` feeds them in training.

Recipe layout (``recipes/finetune_trec.yaml``)::

    name: finetune_trec
    finetune:
      task: {name: trec, max_rows: {train: 600, test: 300}}
      model: sentence-transformers/all-MiniLM-L6-v2
      head: {hidden: 256, epochs: 100, lr: 0.001, weight_decay: 0.0001}
    privatizers:
      - {mechanism: madlib, epsilons: [80]}
      - {mechanism: madlib, postprocess: vector, label: madlib+vector, epsilons: [80]}
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from transformers import AutoModel, AutoTokenizer

from ..config import PrivatizerConfig
from ..io.models import resolve_model
from ..privatizer import Privatizer
from ..space import DEFAULT_MODEL
from .common import Metrics, provenance, recipe_from_dict, result_name, save_result, versions
from .protocol import summarize
from .tasks import load_task


__all__ = ["run_finetune", "train_head", "FeatureModel"]


class FeatureModel:
    """The frozen transformer: mean-pooled features from texts or from ``inputs_embeds`` rows."""

    def __init__(self, model: str = DEFAULT_MODEL, *, batch_size: int = 64, max_length: int = 128) -> None:
        _, folder, _ = resolve_model(model)
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.model = AutoModel.from_pretrained(str(folder)).eval()
        self.batch_size = batch_size
        self.max_length = max_length

    def _pool(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)

    def from_texts(self, texts: list[str]) -> npt.NDArray[np.float32]:
        out = []
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                batch = self.tokenizer(
                    texts[start : start + self.batch_size],
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                )
                out.append(self._pool(self.model(**batch).last_hidden_state, batch["attention_mask"]))
        return torch.cat(out).float().numpy()

    def from_embeds(self, rows: list[list[list[float]]]) -> npt.NDArray[np.float32]:
        out = []
        with torch.inference_mode():
            for start in range(0, len(rows), self.batch_size):
                chunk = [
                    torch.tensor(r[: self.max_length], dtype=torch.float32)
                    for r in rows[start : start + self.batch_size]
                ]
                lengths = [c.shape[0] for c in chunk]
                embeds = torch.nn.utils.rnn.pad_sequence(chunk, batch_first=True)
                mask = torch.zeros(embeds.shape[:2], dtype=torch.long)
                for i, n in enumerate(lengths):
                    mask[i, :n] = 1
                hidden = self.model(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
                out.append(self._pool(hidden, mask))
        return torch.cat(out).float().numpy()


def train_head(
    X: npt.NDArray[np.float32],
    y: npt.NDArray[np.int64],
    *,
    num_labels: int,
    hidden: int = 256,
    epochs: int = 100,
    lr: float = 1e-3,
    weight_decay: float = 1e-4,
    batch_size: int = 64,
    seed: int = 1111,
) -> torch.nn.Module:
    """A one-hidden-layer MLP head trained with AdamW and cross-entropy (features standardized inside)."""
    torch.manual_seed(seed)
    mean = torch.from_numpy(X.mean(0))
    std = torch.from_numpy(X.std(0) + 1e-6)
    head = torch.nn.Sequential(
        torch.nn.Linear(X.shape[1], hidden),
        torch.nn.GELU(),
        torch.nn.Dropout(0.1),
        torch.nn.Linear(hidden, num_labels),
    )
    model = torch.nn.Sequential(_Standardize(mean, std), head)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    g = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(Xt.shape[0], generator=g)
        for start in range(0, Xt.shape[0], batch_size):
            idx = perm[start : start + batch_size]
            loss = torch.nn.functional.cross_entropy(model(Xt[idx]), yt[idx])
            opt.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
    model.eval()
    return model


class _Standardize(torch.nn.Module):
    def __init__(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std  # type: ignore[operator]


def _predict(model: torch.nn.Module, X: npt.NDArray[np.float32]) -> npt.NDArray[np.int64]:
    with torch.inference_mode():
        pred: npt.NDArray[np.int64] = model(torch.from_numpy(X)).argmax(1).numpy().astype(np.int64)
        return pred


@dataclass
class _Run:
    """A ``finetune`` recipe read: its task's data, the feature model, the head's options and the fields every
    record holds."""

    shell: Any  # the recipe's privatizers (a Recipe)
    data: Any  # the task's texts and labels (a TaskData)
    seed: int
    head_cfg: dict[str, Any]
    fm: FeatureModel
    metrics: Metrics
    common: dict[str, Any]
    out_dir: Path

    def accuracy(self, model: torch.nn.Module, X: npt.NDArray[np.float32]) -> float:
        """The head's accuracy on the test labels."""
        y = self.data.labels["test"]
        res = self.metrics.accuracy.compute(predictions=_predict(model, X).tolist(), references=y.tolist())
        return float(res["accuracy"])

    def train(self, X: npt.NDArray[np.float32]) -> torch.nn.Module:
        """A head trained on the training features."""
        y_tr = self.data.labels["train"]
        return train_head(X, y_tr, num_labels=self.data.spec.num_labels, seed=self.seed, **self.head_cfg)


def _read_recipe(raw: dict[str, Any], output_dir: str | os.PathLike[str], recipe_path: Path | None) -> _Run:
    """Parse: the task's data (a train/test split), the feature model and the records' common fields."""
    ft = dict(raw["finetune"])
    head_cfg = dict(ft.get("head") or {})
    seed = int(raw.get("seed", 1111))
    task_cfg = dict(ft["task"])
    shell = recipe_from_dict(
        {"name": raw.get("name", "finetune"), "tasks": [task_cfg], "privatizers": raw.get("privatizers") or []},
        path=recipe_path,
    )
    data = load_task(
        task_cfg["name"],
        data_dir=(raw.get("data") or {}).get("dir"),
        max_rows=task_cfg.get("max_rows"),
        seed=seed,
        root=shell.root,
    )
    if data.spec.protocol == "cv":
        raise ValueError("finetune recipes need a task with a train/test split (sst5 or trec)")
    out_dir = Path(output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics = Metrics()
    fm = FeatureModel(str(ft.get("model", DEFAULT_MODEL)))
    info, command = provenance(shell.name, recipe_path, raw, out_dir)
    common = {
        "task": data.spec.name,
        "task_title": data.spec.title,
        "hub_id": data.spec.hub_id,
        "protocol": "finetune_head",
        "n_rows": {s: len(t) for s, t in data.texts.items()},
        "encoder": {"name": "mean_pooling+mlp_head", "model": ft.get("model", DEFAULT_MODEL), "head": head_cfg},
        "classifier": {"kind": "mlp_head", **head_cfg},
        "recipe": info,
        "versions": versions(),
        "command": command,
    }
    return _Run(shell, data, seed, head_cfg, fm, metrics, common, out_dir)


def _clean_result(run: _Run, clean: dict[str, npt.NDArray[np.float32]], resume: bool, say: Any) -> Path:
    """The clean baseline's record (kept where it exists and ``resume``)."""
    clean_path = run.out_dir / result_name(run.data.spec.name, None, None, "clean")
    if not (resume and clean_path.exists()):
        a = run.accuracy(run.train(clean["train"]), clean["test"])
        mean, std, kind = summarize([a], run.data.labels["test"].size, False)
        save_result(
            clean_path,
            {
                **run.common,
                "setting": "clean",
                "mechanism": "none",
                "label": "clean",
                "epsilon": None,
                "accuracy": mean,
                "accuracy_std": std,
                "accuracy_std_kind": kind,
                "values": [mean],
                "privacy": None,
            },
        )
        say(f"finetune: clean {mean:.2f}")
    return clean_path


def _private_features(
    run: _Run, cfg: PrivatizerConfig
) -> tuple[dict[str, npt.NDArray[np.float32]], dict[str, Any], float]:
    """Each split privatized under ``cfg`` and encoded (vectors fed as ``inputs_embeds``), the privacy report and
    the seconds it took."""
    t = time.perf_counter()
    feats: dict[str, npt.NDArray[np.float32]] = {}
    report: dict[str, Any] = {}
    for split, texts in run.data.texts.items():
        # public benchmark data with the recipe's public seed (e.g. 1111): not a privacy key, so a small
        # seed is allowed here; never reuse it on private data
        priv = Privatizer(cfg, seed=run.seed, split=f"senteval/{run.data.spec.name}/{split}", allow_weak_seed=True)
        out = priv({"text": texts}, list(range(len(texts))))
        feats[split] = (
            run.fm.from_embeds(out["inputs_embeds"]) if "inputs_embeds" in out else run.fm.from_texts(out["text"])
        )
        report = priv.privacy_report()
    return feats, report, time.perf_counter() - t


_PRIVACY_KEYS = ("mechanism", "epsilon", "guarantee", "certified", "epsilon_token", "postprocess", "scale")


def _private_results(
    run: _Run,
    spec: Any,
    eps: float,
    paths: dict[str, Path],
    clean: dict[str, npt.NDArray[np.float32]],
    clean_acc: float,
    say: Any,
) -> None:
    """One privatizer at one ε: a head trained on privatized text, scored on clean (``train_only``) and on
    privatized (``train_and_test``) test text; one record each."""
    cfg = PrivatizerConfig(
        mechanism=spec.mechanism,
        epsilon=eps,
        postprocess=spec.postprocess,
        options=dict(spec.options),
        delta=spec.delta,
        model=spec.model,
    )
    feats, report, seconds = _private_features(run, cfg)
    head = run.train(feats["train"])
    for setting, path in paths.items():
        test = clean["test"] if setting == "train_only" else feats["test"]
        a = run.accuracy(head, test)
        mean, std, kind = summarize([a], run.data.labels["test"].size, False)
        save_result(
            path,
            {
                **run.common,
                "setting": setting,
                "mechanism": spec.mechanism,
                "label": spec.name,
                "postprocess": spec.postprocess,
                "epsilon": eps,
                "accuracy": mean,
                "accuracy_std": std,
                "accuracy_std_kind": kind,
                "values": [mean],
                "clean_accuracy": clean_acc,
                "privacy": {k: report.get(k) for k in _PRIVACY_KEYS},
                "privacy_report": report,
                "timing_s": {"privatize_and_encode": seconds},
            },
        )
        say(f"finetune: {spec.name} eps={eps:g} {setting} {mean:.2f}")


def run_finetune(
    raw: dict[str, Any],
    output_dir: str | os.PathLike[str],
    *,
    recipe_path: Path | None = None,
    progress: Any = None,
    resume: bool = True,
) -> list[Path]:
    """Run a ``finetune`` recipe (see the module docstring); one JSON per (privatizer, ε, setting).

    With ``resume`` the results that exist are kept; without it every one is recomputed.
    """
    say = progress or (lambda msg: None)
    run = _read_recipe(raw, output_dir, recipe_path)
    t0 = time.perf_counter()
    clean = {s: run.fm.from_texts(t) for s, t in run.data.texts.items()}
    say(f"finetune: clean features in {time.perf_counter() - t0:.0f} s")
    clean_path = _clean_result(run, clean, resume, say)
    clean_acc = float(json.loads(clean_path.read_text())["accuracy"])
    written = [clean_path]
    for spec in run.shell.privatizers:
        for eps in spec.epsilons:
            paths = {
                s: run.out_dir / result_name(run.data.spec.name, spec.name, eps, s)
                for s in ("train_only", "train_and_test")
            }
            if not (resume and all(p.exists() for p in paths.values())):
                _private_results(run, spec, eps, paths, clean, clean_acc, say)
            written.extend(paths.values())
    return written
