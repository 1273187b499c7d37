"""Count the lines of ``hf_textdp`` (without ``evaluation/``) as issue 19's target does, and split them.

Python lines are split into docstrings, comment-only lines, blank lines and the rest (code); other
files (C kernels, JSON data, the sample) are counted whole. Run from the repository root:

    python scripts/code_lines.py [REPO]
"""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import tokenize
from pathlib import Path


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                if isinstance(body[0].value.value, str):
                    lines.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    return lines


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    listed = subprocess.check_output(["git", "ls-files", "hf_textdp"], cwd=root, text=True).split()
    files = [f for f in listed if not f.startswith("hf_textdp/evaluation/")]
    total = docs = comments = blank = other = 0
    for name in files:
        text = (root / name).read_text(encoding="utf-8", errors="replace")
        lines = text.splitlines()
        if not name.endswith(".py"):
            other += len(lines)
            continue
        tokens = tokenize.generate_tokens(io.StringIO(text).readline)
        comment = {
            t.start[0] for t in tokens if t.type == tokenize.COMMENT and lines[t.start[0] - 1].lstrip()[:1] == "#"
        }
        total += len(lines)
        docs += len(_docstring_lines(ast.parse(text)))
        comments += len(comment)
        blank += sum(1 for line in lines if not line.strip())
    code = total - docs - comments - blank
    print(
        f"py lines {total}, docstrings {docs}, comment lines {comments}, blank {blank}, py code-only {code}; "
        f"non-py files {other}"
    )


if __name__ == "__main__":
    main()
