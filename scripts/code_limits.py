"""Check the size limits of the house style (issue 55 item 4): no ``.py`` file over 500 lines and no
function over 80 lines (from its ``def`` line to its last line, docstring included). Run from the
repository root:

    python scripts/code_limits.py [PATH ...]     # default: hf_textdp

Prints each file and function over its limit, longest first, and a summary line; exits 1 when
something is over (0 otherwise), so CI can run it.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80


def function_lengths(path: Path) -> list[tuple[int, str, int]]:
    """(length, qualified name, first line) of every function and method in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[tuple[int, str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                out.append(((child.end_lineno or child.lineno) - child.lineno + 1, name, child.lineno))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def main(argv: list[str]) -> int:
    roots = [Path(a) for a in argv] or [Path("hf_textdp")]
    files = sorted(f for r in roots for f in (r.rglob("*.py") if r.is_dir() else [r]))
    long_files = []
    long_funcs = []
    for f in files:
        n = len(f.read_text(encoding="utf-8").splitlines())
        if n > MAX_FILE_LINES:
            long_files.append((n, str(f)))
        long_funcs += [(k, f"{f}:{line} {name}") for k, name, line in function_lengths(f) if k > MAX_FUNCTION_LINES]
    for n, name in sorted(long_files, reverse=True):
        print(f"file {name}: {n} lines (> {MAX_FILE_LINES})")
    for k, name in sorted(long_funcs, reverse=True):
        print(f"function {name}: {k} lines (> {MAX_FUNCTION_LINES})")
    print(
        f"{len(files)} files: {len(long_files)} over {MAX_FILE_LINES} lines, "
        f"{len(long_funcs)} functions over {MAX_FUNCTION_LINES} lines"
    )
    return 1 if long_files or long_funcs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
