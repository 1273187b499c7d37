"""SentEval-style evaluation of privatized text: tasks, encoders, the classifier protocol, recipes,
privacy diagnostics, plots and the summary table (``hf-textdp evaluate``). Needs the ``eval`` extra
(``pip install 'hf-textdp[eval]'``: scikit-learn, matplotlib, PyYAML)."""

from __future__ import annotations

from .common import Recipe, load_recipe, recipe_from_dict, result_name
from .protocol import ClassifierConfig, run_protocol, stratified_folds
from .recipe import run_recipe
from .tasks import TASKS, load_task, senteval_dir


__all__ = [
    "TASKS",
    "ClassifierConfig",
    "Recipe",
    "load_recipe",
    "load_task",
    "recipe_from_dict",
    "result_name",
    "run_protocol",
    "run_recipe",
    "senteval_dir",
    "stratified_folds",
]
