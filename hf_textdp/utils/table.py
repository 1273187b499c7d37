"""Plain-text tables for the CLI's summaries: each column padded to its widest cell."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence


__all__ = ["format_table"]


def format_table(
    header: Sequence[str], rows: Iterable[Sequence[object]], *, right: Collection[int] = (), indent: str = ""
) -> list[str]:
    """The lines of a table: ``header`` then ``rows`` (cells given as ``str()``), columns two spaces apart.

    Columns whose index is in ``right`` are right-aligned (numbers), the others left-aligned; trailing
    spaces are stripped.
    """
    table = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in table if i < len(r)) for i in range(len(table[0]))]

    def line(cells: list[str]) -> str:
        padded = (
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=False))
        )
        return (indent + "  ".join(padded)).rstrip()

    return [line(r) for r in table]
