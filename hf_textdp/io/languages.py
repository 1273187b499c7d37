"""The scripts of a model's candidates when none are given (space.md §6.3): those of the language the model
declares (its model card's ``language:``, or a well-known vector file's name), else every script."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from huggingface_hub.repocard import metadata_load

from ..candidates import ALL_SCRIPTS, CandidateSpec, language_scripts
from ..utils.logging import get_logger


__all__ = ["declared_languages", "default_scripts"]

logger = get_logger(__name__)


# Vector files whose language their name states: GloVe and word2vec GoogleNews (English), fastText cc.xx / wiki.xx.
_VECTOR_LANGUAGE = re.compile(r"^(?:(glove|googlenews)|(?:cc|wiki)\.([a-z]{2,3}))[.-]", re.IGNORECASE)


def declared_languages(kind: str, path: Path) -> list[str]:
    """The languages a model declares (space.md §6.3): ``language:`` in the YAML front matter of the folder's
    model card (README.md), as Hugging Face models declare it; for a vector file, the language its well-known
    name states (GloVe, word2vec GoogleNews, fastText ``cc.xx``/``wiki.xx``). Empty when none is declared."""
    if kind == "file":
        m = _VECTOR_LANGUAGE.match(path.name)
        return [] if m is None else ["en" if m.group(1) else m.group(2).lower()]
    card = path / "README.md"
    if not card.is_file():
        return []
    try:
        language = metadata_load(card) or {}
    except Exception:  # noqa: BLE001 - a card without readable metadata declares nothing
        return []
    value = language.get("language")
    values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return [str(v) for v in values]


def default_scripts(
    spec: CandidateSpec, model: str, kind: str, path: Path, *, note: bool = True
) -> tuple[CandidateSpec, str]:
    """``spec`` with its scripts resolved (space.md §6.3) and where they come from, for the report: the scripts
    given (set ``all`` keeps every script), else those of the model's declared language(s), else every script
    (with a one-line note, unless ``note`` is false: a key computed again needs none)."""
    if spec.scripts is not None or spec.set == "all":  # "all": every non-special row, as in earlier versions
        return spec, "given"
    languages = declared_languages(kind, path)
    scripts = language_scripts(languages)
    if scripts is not None:
        return replace(spec, scripts=scripts), f"the model's language ({', '.join(languages)})"
    if note:
        logger.info(
            "model %r declares no language we map to scripts: candidates in every script; restrict them with "
            "candidates={'scripts': [...]} (CLI --candidate-scripts latin).",
            model if kind == "folder" else path.name,
        )
    return replace(spec, scripts=(ALL_SCRIPTS,)), "no language declared"
