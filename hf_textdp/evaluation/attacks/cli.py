"""``hf-textdp attack`` on a user's own files: read them, run the attacks, print the record."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ...config import PrivatizerConfig
from ...errors import InvalidParameterError
from ...io.frequencies import check_not_input, corpus_texts
from ...utils.table import format_table
from .run import AttackSettings, run_attack


__all__ = ["attack_files", "format_record"]


def _read(path: Path, param: str, max_rows: int | None = None) -> list[str]:
    if not path.is_file():
        raise InvalidParameterError(f"{param}: {str(path)!r} is not a file (.txt with a text per line, or .jsonl).")
    texts: list[str] = []
    for block in corpus_texts(path, param=param):
        texts.extend(block)
        if max_rows is not None and len(texts) >= max_rows:
            return texts[:max_rows]
    if not texts:
        raise InvalidParameterError(f"{param}: {str(path)!r} holds no text.")
    return texts


def attack_files(
    config: PrivatizerConfig,
    private: Path,
    public: Sequence[Path],
    *,
    max_rows: int | None = None,
    contextual: bool = True,
    inversion: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Release ``private`` with ``config`` under a fresh key and attack it with ``public`` as the adversary's text."""
    if max_rows is not None and max_rows < 1:
        raise InvalidParameterError(f"--max-rows must be an int >= 1, got {max_rows}.")
    for p in public:
        check_not_input(str(p), str(private), param="--public")
    private_texts = _read(private, "--private", max_rows)
    public_texts = [t for p in public for t in _read(p, "--public")]
    record, _ = run_attack(
        config,
        private_texts,
        public_texts,
        settings=AttackSettings.sized(len(private_texts), contextual=contextual, inversion=inversion),
        progress=progress,
    )
    record["public_files"] = [p.name for p in public]
    return record


def _cell(e: dict[str, Any] | None) -> str:
    return "–" if not e else f"{100 * e['value']:.1f} [{100 * e['ci95'][0]:.1f}, {100 * e['ci95'][1]:.1f}]"


def format_record(record: dict[str, Any]) -> str:
    """A few lines: the release, then each attack's top-1 and top-5 recovery with intervals."""
    lines = [
        f"{record['mechanism']} ε={record['epsilon']:g}: {record['n_private_tokens']:,} private tokens, "
        f"{100 * record['replacement_rate']:.1f} % replaced",
    ]
    attacks = record["attacks"].items()
    rows = [(name, _cell(e.get("recovery_top1")), _cell(e.get("recovery_top5"))) for name, e in attacks]
    lines += format_table(("attack", "top-1 % [95% CI]", "top-5 % [95% CI]"), rows)
    groups = record.get("groups") or {}
    if groups:
        names = ("replaced", "replaced_content", "kept", "words_all")
        lines.append("top-1 % by group: " + ", ".join(names))
        per_group = [(name, *(_cell(per.get(g, {}).get("top1")) for g in names)) for name, per in groups.items()]
        lines += format_table(("attack", *names), per_group)
        head = record.get("headline") or {}
        if head:
            lines.append(
                "headline (chosen on held-out public rows): "
                + ", ".join(f"{g} {h['attack']}" for g, h in head.items())
            )
    dn = record.get("deniability") or {}
    if dn.get("n_w_mean") is not None:
        lines.append(
            f"plausible deniability: N_w {dn['n_w_mean']:.3f}, S_w {dn['s_w_mean']:.1f} (Feyisetan et al. 2020)"
        )
    return "\n".join(lines)
