"""A privacy report's internal consistency, checked before ``report`` and ``card`` show it (issue 53, R3).

The report is bound to its output by the output's SHA-256 (:func:`~hf_textdp.io.reports.verify_output`), so the
output's rows (``dp_tokens``, ``dp_epsilon``, ``dp_sensitive_tokens``) are what the run wrote. A report edited by
hand (ε 10 → 0.5, ``others`` keep → privatize) then contradicts them or itself:

- ε_tok against ε: ``dp`` mechanisms state ε_tok = ε; Euclidean metric-DP ones ε_tok ≤ ε·diam (the space's
  diameter, ``scale.diam``), and ``scale.epsilon_diam`` = ε·diam;
- every row's ε against its tokens: ``dp_tokens``·ε_tok, or ``n_s``·ε_tok,s + ``n_o``·ε_tok,o under selective
  privatization (null with ``others="keep"``), and the totals (rows, tokens, largest row) against the rows;
- the classes against the output's columns: a selective report needs ``dp_sensitive_tokens``, and only it;
- a per-person release (users.md, selective.md §8) by what its report states (:mod:`.report_rules`): each row's ε
  at most its plain bound under a budget's levels, or its repeated strings charged once under ``consistent``, and
  the ``users`` section against itself, the budget and the rows.

Numbers only: a message names the row's index and the figures, never its text.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import OutputChangedError
from .paths import FILE_FORMATS
from .report_rules import close as _close
from .report_rules import row_rule, user_faults


__all__ = ["check_report", "row_columns"]

_COLUMNS = ("dp_tokens", "dp_epsilon", "dp_delta", "dp_sensitive_tokens")
_RTOL = 1e-9  # the JSON and CSV writers keep 10 significant decimals (report_rules.close's tolerance)


def row_columns(output: str | os.PathLike[str], extra: tuple[str, ...] = ()) -> dict[str, list[Any]] | None:
    """The ``dp_*`` columns (and the ``extra`` ones) of the output (every split of a folder, in order; a column the
    output lacks is absent), or ``None`` when its rows cannot be read (a folder that is no saved dataset: only the
    report is checked)."""
    import pyarrow as pa  # not at import: the CLI's startup imports no heavy library

    try:
        return _read_columns(Path(output), (*_COLUMNS, *extra))
    except (OSError, ValueError, pa.ArrowException):
        return None


def _read_columns(path: Path, names: tuple[str, ...]) -> dict[str, list[Any]]:
    fmt = FILE_FORMATS.get(path.suffix.lower()) if path.is_file() else None
    if fmt == "json":
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
        present = [c for c in names if rows and c in rows[0]]
        return {c: [r.get(c) for r in rows] for c in present}
    if fmt in ("parquet", "csv"):
        import pyarrow.csv as pcsv
        import pyarrow.parquet as pq

        table = pq.read_table(path) if fmt == "parquet" else pcsv.read_csv(path)
        return {c: table.column(c).to_pylist() for c in names if c in table.column_names}
    import datasets

    loaded = datasets.load_from_disk(str(path))
    parts = list(loaded.values()) if isinstance(loaded, datasets.DatasetDict) else [loaded]
    present = [c for c in names if parts and all(c in p.column_names for p in parts)]
    return {c: [v for p in parts for v in p.data.column(c).to_pylist()] for c in present}


def _bound_faults(report: dict[str, Any]) -> list[str]:
    """ε_tok against ε and the diameter (the report alone)."""
    eps, tok, guarantee = report.get("epsilon"), report.get("epsilon_token"), report.get("guarantee")
    scale = report.get("scale") or {}
    if not isinstance(eps, (int, float)) or (tok is not None and not isinstance(tok, (int, float))):
        return [f"epsilon {eps!r} or epsilon_token {tok!r} is not a number"]
    faults = []
    if guarantee == "dp" and tok is not None and not _close(tok, eps):
        faults.append(f"epsilon_token {tok!r} is not epsilon {eps!r} (a {report.get('mechanism')} bound is ε)")
    diam = scale.get("diam")
    if guarantee == "metric_dp" and report.get("metric") == "euclidean" and isinstance(diam, (int, float)):
        if tok is not None and tok > eps * diam * (1 + _RTOL):
            faults.append(
                f"epsilon_token {tok!r} is more than epsilon {eps!r} × the model's diameter {diam!r} = {eps * diam!r}"
            )
        if isinstance(scale.get("epsilon_diam"), (int, float)) and not _close(scale["epsilon_diam"], eps * diam):
            faults.append(f"scale.epsilon_diam {scale['epsilon_diam']!r} is not epsilon {eps!r} × diam {diam!r}")
    return faults


def _class_faults(report: dict[str, Any]) -> list[str]:
    """A selective report's classes against each other: ``others`` privatize has the others' ε_tok (the report's
    own) and keeps no other token; ``others`` keep has none and keeps them."""
    sens, totals = report.get("sensitive"), report.get("totals") or {}
    if not sens:
        return []
    kept, other = totals.get("kept_other_tokens", 0), sens.get("others_epsilon_token")
    if sens.get("others") == "privatize" and kept:
        return [f"sensitive.others is 'privatize' but totals.kept_other_tokens is {kept!r} (kept unchanged)"]
    if sens.get("others") == "privatize" and other != report.get("epsilon_token"):
        return [
            f"sensitive.others is 'privatize' but the others' epsilon_token is {other!r}, not the report's "
            f"{report.get('epsilon_token')!r}"
        ]
    if sens.get("others") == "keep" and other is not None:
        return [f"sensitive.others is 'keep' but the others have an epsilon_token ({other!r})"]
    return []


def _row_bounds(report: dict[str, Any], cols: dict[str, list[Any]]) -> list[float | None]:
    """Each row's ε as the report's own figures give it (``None``: a null bound)."""
    tok, sens = report.get("epsilon_token"), report.get("sensitive")
    n = cols["dp_tokens"]
    if not sens:
        return [None if tok is None else float(k) * tok for k in n]
    if sens.get("others") == "keep" or sens.get("epsilon_token") is None:
        return [None] * len(n)
    other = sens.get("others_epsilon_token")
    s = cols.get("dp_sensitive_tokens") or [0] * len(n)  # a missing column is reported by _row_faults
    return [
        None if other is None else ks * sens["epsilon_token"] + (k - ks) * other for k, ks in zip(n, s, strict=True)
    ]


def _row_faults(report: dict[str, Any], cols: dict[str, list[Any]] | None) -> list[str]:
    """The rows' ε and tokens against the report's bounds, classes and totals (``None``: unreadable rows)."""
    faults: list[str] = []
    if cols is None:
        return faults
    selective = bool(report.get("sensitive"))
    if selective != ("dp_sensitive_tokens" in cols):
        has = "has" if "dp_sensitive_tokens" in cols else "has no"
        faults.append(f"the report is {'' if selective else 'not '}selective but the output {has} dp_sensitive_tokens")
    if "dp_tokens" not in cols:
        return faults
    totals, n = report.get("totals") or {}, cols["dp_tokens"]
    for key, value in (("rows", len(n)), ("dp_tokens", sum(n)), ("max_row_dp_tokens", max(n, default=0))):
        if totals.get(key) != value:
            faults.append(f"totals.{key} is {totals.get(key)!r} but the output's rows give {value!r}")
    sens_col = cols.get("dp_sensitive_tokens")
    # Totals.to_dict leaves sensitive_tokens out when no position was sensitive (a detector that found nothing)
    if selective and sens_col is not None and totals.get("sensitive_tokens", 0) != sum(sens_col):
        faults.append("totals.sensitive_tokens is not the sum of the rows' dp_sensitive_tokens")
    if "dp_epsilon" not in cols:
        return faults
    uncertified = report.get("certified") is False  # an uncertified calibration bounds no row: null rows
    agrees, n_s = row_rule(report), sens_col or [0] * len(n)
    for i, (want, got) in enumerate(zip(_row_bounds(report, cols), cols["dp_epsilon"], strict=True)):
        if got is None and uncertified:
            continue
        if (want is None) != (got is None) or (want is not None and not agrees(want, got, n_s[i], n[i] - n_s[i])):
            faults.append(f"row {i}'s dp_epsilon is {got!r} where the report's bounds give {want!r}")
            break
    largest = totals.get("max_row_dp_epsilon")
    values = [v for v in cols["dp_epsilon"] if v is not None]
    real = None if len(values) < len(n) else max(values, default=0.0)
    if (largest is None) != (real is None) or (largest is not None and real is not None and not _close(largest, real)):
        faults.append(f"totals.max_row_dp_epsilon is {largest!r} but the output's rows give {real!r}")
    return faults


def check_report(report: dict[str, Any], output: str | os.PathLike[str]) -> None:
    """Refuse a report of ``output`` that contradicts itself or the output's rows (module doc): one line naming
    the first contradiction and how many there are."""
    users = report.get("users")
    column = users.get("column") if isinstance(users, dict) else None
    cols = row_columns(output, (column,) if isinstance(column, str) else ())  # a published user column: recounted
    faults = _bound_faults(report) + _class_faults(report) + _row_faults(report, cols) + user_faults(report, cols)
    if faults:
        more = f" (and {len(faults) - 1} more)" if len(faults) > 1 else ""
        raise OutputChangedError(
            f"output {str(output)!r}: its privacy report contradicts itself or the output: {faults[0]}{more}. It was "
            "edited after it was written, so it describes no run: privatize the input again to get a true report."
        )
