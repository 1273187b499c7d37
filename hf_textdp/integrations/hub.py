"""Publish to the Hugging Face Hub: privatized datasets, privatizer configs and recipe results.

Everything goes through :class:`huggingface_hub.HfApi` (``create_repo`` then one ``upload_folder``
commit), with a generated card (:mod:`hf_textdp.integrations.cards`) and the privacy report beside the data. The
noise seed is never uploaded: it is not in any file hf-textdp writes.

Example:

>>> from hf_textdp.integrations.hub import push_to_hub                                  # doctest: +SKIP
>>> push_to_hub("reviews_private.jsonl", "me/reviews-private")            # doctest: +SKIP
'https://huggingface.co/datasets/me/reviews-private'
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from huggingface_hub import HfApi, ModelCard, ModelCardData

from ..errors import HubUnreachableError, InvalidParameterError, OriginalTextError
from ..io.reports import load_bound_report
from ..validation import check_bool
from .cards import find_report, is_results_folder, original_columns, render_card, results_card


__all__ = ["push_to_hub", "stage_for_hub", "detect_kind", "check_original_columns"]

Kind = Literal["dataset", "config", "results"]
_CONFIG_NAME = "privatizer_config.json"


def detect_kind(path: str | os.PathLike[str]) -> Kind:
    """What ``path`` holds: a privatized ``dataset`` (with its report), a privatizer ``config``, or ``results``.

    Raises:
        InvalidParameterError: none of these.
    """
    p = Path(path)
    if not p.exists():
        raise InvalidParameterError(f"path={str(p)!r} does not exist.")
    if is_results_folder(p):
        return "results"
    if find_report(p) is not None:
        return "dataset"
    if (p.is_file() and p.name == _CONFIG_NAME) or (p.is_dir() and (p / _CONFIG_NAME).is_file()):
        return "config"
    raise InvalidParameterError(
        f"path={str(p)!r} is not something hf-textdp publishes: expected a privatized output with its privacy "
        f"report, a {_CONFIG_NAME} (or a folder holding one), or a folder of hf-textdp evaluate results."
    )


def _config_card(config: dict[str, Any], repo_id: str) -> str:
    data = ModelCardData(tags=["differential-privacy", "hf-textdp", "privatizer-config"], library_name="hf-textdp")
    template = """---
{{ card_data }}
---

# Privatizer configuration `{{ repo_id }}`

An hf-textdp `PrivatizerConfig`: mechanism `{{ mechanism }}`,
ε = {{ epsilon }} per token, model `{{ model }}`, post-processing `{{ postprocess }}`.

```python
from hf_textdp import Privatizer, PrivatizerConfig

config = PrivatizerConfig.from_pretrained("{{ repo_id }}")
priv = Privatizer(config, seed=secrets.randbits(64))  # the seed is a secret key: never publish it
```

```json
{{ config_json }}
```
"""
    card = ModelCard.from_template(
        data,
        template_str=template,
        repo_id=repo_id,
        mechanism=config.get("mechanism"),
        epsilon=config.get("epsilon"),
        model=config.get("model"),
        postprocess=config.get("postprocess"),
        config_json=json.dumps(config, sort_keys=True, indent=2),
    )
    return str(card)


def check_original_columns(path: str | os.PathLike[str], *, allow_original: bool = False) -> list[str]:
    """The ``*_original`` columns of a saved output; raise unless ``allow_original`` when there are any.

    Raises:
        OriginalTextError: the output holds the original (non-private) text and ``allow_original`` is off.
    """
    cols = original_columns(path)
    if cols and not allow_original:
        raise OriginalTextError(
            f"path={str(path)!r}: column(s) {cols} hold the original, NON-private input text "
            "(privatized with keep_original=True); publishing them would undo the guarantee for every row. "
            "Remove them first (e.g. ds.remove_columns(...)), or pass allow_original=True (CLI: --allow-original) "
            "to publish them anyway under a card that says the dataset is not private."
        )
    return cols


def stage_for_hub(
    path: str | os.PathLike[str], repo_id: str, folder: str | os.PathLike[str], *, allow_original: bool = False
) -> Kind:
    """Copy what :func:`push_to_hub` uploads into ``folder`` (data, report, card); return the kind.

    Raises:
        OriginalTextError: a dataset holds ``*_original`` columns and ``allow_original`` is off.
    """
    p = Path(path)
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    kind = detect_kind(p)
    if kind == "results":
        for item in sorted(p.iterdir()):
            if item.is_file() and item.suffix in (".json", ".png", ".md") and not item.name.startswith("."):
                shutil.copy2(item, out / item.name)
        (out / "README.md").write_text(str(results_card(p)), encoding="utf-8")
    elif kind == "dataset":
        check_original_columns(p, allow_original=allow_original)
        report = find_report(p)
        assert report is not None
        load_bound_report(p, report)  # refuses an output changed since it was privatized, before anything is copied
        if p.is_dir():
            shutil.copytree(p, out / "data", ignore=shutil.ignore_patterns(".*", "privacy_report.json"))
        else:
            (out / "data").mkdir(exist_ok=True)
            shutil.copy2(p, out / "data" / p.name)
        shutil.copy2(report, out / "privacy_report.json")
        config_file = (p / _CONFIG_NAME) if p.is_dir() else p.with_name(_CONFIG_NAME)
        if config_file.is_file():
            shutil.copy2(config_file, out / _CONFIG_NAME)
        (out / "README.md").write_text(str(render_card(p, repo_id=repo_id)), encoding="utf-8")
    else:
        cfg_path = p if p.is_file() else p / _CONFIG_NAME
        config = json.loads(cfg_path.read_text(encoding="utf-8"))
        shutil.copy2(cfg_path, out / _CONFIG_NAME)
        (out / "README.md").write_text(_config_card(config, repo_id), encoding="utf-8")
    return kind


def push_to_hub(
    path: str | os.PathLike[str],
    repo_id: str,
    *,
    private: bool = False,
    token: str | None = None,
    commit_message: str | None = None,
    api: Any = None,
    allow_original: bool = False,
) -> str:
    """Publish a privatized output, a privatizer config or a recipe's results, with its card.

    Args:
        path (`str`): a saved privatized output (file or ``save_to_disk`` folder with its privacy report),
            a ``privatizer_config.json`` (or its folder), or an ``hf-textdp evaluate`` results folder.
        repo_id (`str`): ``user/name``. Datasets go to a dataset repository; configs and results
            (``model-index`` metadata) to a model repository.
        private (`bool`, defaults to `False`), token (`str`, *optional*), commit_message (`str`, *optional*).
        api (`HfApi`, *optional*): the client to use (default ``huggingface_hub.HfApi(token=token)``).
        allow_original (`bool`, defaults to `False`): publish a dataset that holds ``*_original`` columns
            (the input text kept by ``keep_original=True``, not private). Off, such a dataset is refused
            before anything is uploaded; on, its card says first that the dataset is not private.

    Returns:
        `str`: the repository URL.

    Raises:
        InvalidParameterError: ``path`` is not something hf-textdp publishes, or ``repo_id`` is malformed.
        OriginalTextError: the dataset holds ``*_original`` columns and ``allow_original`` is off.
    """
    if not isinstance(repo_id, str) or repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise InvalidParameterError(f"repo_id must be 'namespace/name', got {repo_id!r}.")
    client = api if api is not None else HfApi(token=token)
    with tempfile.TemporaryDirectory(prefix="hf_textdp_push_") as tmp:
        kind = stage_for_hub(path, repo_id, tmp, allow_original=check_bool(allow_original, "allow_original"))
        repo_type = "dataset" if kind == "dataset" else "model"
        with hub_unreachable():
            url = client.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True)
            client.upload_folder(
                repo_id=repo_id,
                folder_path=tmp,
                repo_type=repo_type,
                commit_message=commit_message or f"hf-textdp: upload {kind} with card and privacy report",
            )
    return str(url)


#: the base classes of a failure to reach a server, by name: httpx's and httpx2's (huggingface_hub >= 1 uses one
#: of them), requests' and the builtins
_NETWORK_ERRORS = {"TransportError", "NetworkError", "TimeoutException", "ConnectionError", "TimeoutError"}


@contextlib.contextmanager
def hub_unreachable() -> Iterator[None]:
    """Turn a failure to reach the Hub (offline mode, a name that does not resolve, a refused or timed-out
    connection) into :class:`~hf_textdp.errors.HubUnreachableError`, one line naming the cause."""
    from huggingface_hub.errors import OfflineModeIsEnabled

    try:
        yield
    except OfflineModeIsEnabled:
        raise HubUnreachableError(
            "could not reach the Hugging Face Hub (HF_HUB_OFFLINE is set); unset it to push."
        ) from None
    except Exception as err:
        if not any(c.__name__ in _NETWORK_ERRORS for c in type(err).__mro__):
            raise
        reason = " ".join(str(err).split()) or type(err).__name__
        raise HubUnreachableError(
            f"could not reach the Hugging Face Hub ({type(err).__name__}: {reason}); check your connection."
        ) from None
