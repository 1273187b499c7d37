"""Training until the loss plateaus: the per-step training losses of a ``Trainer`` run, their per-epoch
means, and the stopping rule (``Budget.plateau_tol``): stop at the end of an epoch whose mean training loss
improved by less than ``plateau_tol`` (relative) over the previous epoch's, or at the ``epochs`` cap.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from transformers import Trainer, TrainerCallback


__all__ = ["plateaued", "LossLog", "RecordingTrainer", "PlateauCallback"]


def plateaued(epoch_losses: list[float], tol: float) -> bool:
    """Whether the last epoch's mean loss improved by less than ``tol`` relative to the one before."""
    if len(epoch_losses) < 2 or tol <= 0:
        return False
    prev, last = epoch_losses[-2], epoch_losses[-1]
    return (prev - last) < tol * abs(prev)


class LossLog:
    """The training loss of every optimizer step and the mean of each finished epoch."""

    def __init__(self) -> None:
        self.steps: list[float] = []
        self.epochs: list[float] = []
        self._start = 0

    def close_epoch(self) -> float:
        chunk = self.steps[self._start :]
        self._start = len(self.steps)
        self.epochs.append(float(np.mean(chunk)) if chunk else float("nan"))
        return self.epochs[-1]

    def curve(self, block: int) -> list[float]:
        """Means of consecutive blocks of ``block`` steps (the last block may be shorter)."""
        return [float(np.mean(self.steps[i : i + block])) for i in range(0, len(self.steps), block)]


class RecordingTrainer(Trainer):
    """``Trainer`` that appends each training batch's loss to ``loss_log.steps`` (one batch per step: no
    gradient accumulation)."""

    loss_log: LossLog

    def compute_loss(
        self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        out = super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)
        if model.training:
            loss = out[0] if isinstance(out, tuple) else out
            self.loss_log.steps.append(float(loss.detach()))
        return out


class PlateauCallback(TrainerCallback):
    """Closes an epoch of ``log`` at each epoch end and stops training once :func:`plateaued`."""

    def __init__(self, log: LossLog, tol: float) -> None:
        self.log = log
        self.tol = tol
        self.stopped_on_plateau = False

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.log.close_epoch()
        if plateaued(self.log.epochs, self.tol):
            self.stopped_on_plateau = True
            control.should_training_stop = True
        return control
