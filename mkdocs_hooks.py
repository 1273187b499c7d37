"""MkDocs hook: repository files outside docs/ that the site shows (every griffe warning fails the strict build)."""

from __future__ import annotations

from typing import Any


# Repository files the site shows, outside docs/: (path in the repository, path in the site).
EXTRA_FILES = (("results/attacks/frontier.png", "assets/frontier.png"),)


def on_files(files: Any, config: Any) -> Any:
    from pathlib import Path

    from mkdocs.structure.files import File

    root = Path(config["config_file_path"]).parent
    for source, target in EXTRA_FILES:
        files.append(File.generated(config, target, abs_src_path=str(root / source)))
    return files
