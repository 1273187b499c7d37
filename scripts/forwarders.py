"""List forwarding-only methods (issue 55 item 1): a method whose whole body, after its docstring, is
``return self.a.b`` or ``return self.a.b(...)`` (the arguments passed on), i.e. a second door to an
object the class holds. Run from the repository root:

    python scripts/forwarders.py [PATH ...]      # default: hf_textdp/privatizer.py hf_textdp/integrations

Prints one line per forwarder (file:line Class.method -> self.a.b, public or private, documented or
not) and a count per class; exits 0 (it measures, it does not judge).
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path


def _self_chain(node: ast.expr) -> str | None:
    """``self.a.b`` (two attributes or more below ``self``) as a dotted string, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "self" and len(parts) >= 2:
        return "self." + ".".join(reversed(parts))
    return None


def forwarded(func: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The ``self.a.b`` a method only forwards to, or None."""
    body = func.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return None
    value = body[0].value
    if isinstance(value, ast.Call):
        value = value.func
    return _self_chain(value)


def scan(paths: list[Path]) -> list[tuple[str, int, str, str, str, bool]]:
    """(file, line, class, method, target, documented) for each forwarder under ``paths``."""
    files = [f for p in paths for f in (sorted(p.rglob("*.py")) if p.is_dir() else [p])]
    found = []
    for file in files:
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for func in cls.body:
                if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    target = forwarded(func)
                    if target is not None:
                        doc = ast.get_docstring(func) is not None
                        found.append((str(file), func.lineno, cls.name, func.name, target, doc))
    return found


def main(argv: list[str]) -> None:
    paths = [Path(a) for a in argv] or [Path("hf_textdp/privatizer.py"), Path("hf_textdp/integrations")]
    found = scan(paths)
    for file, line, cls, name, target, doc in found:
        kind = "private" if name.startswith("_") else "public"
        print(f"{file}:{line} {cls}.{name} -> {target} ({kind}, {'documented' if doc else 'undocumented'})")
    per_class = Counter(cls for _, _, cls, _, _, _ in found)
    print(f"{len(found)} forwarding-only methods" + (f": {dict(per_class)}" if found else ""))


if __name__ == "__main__":
    main(sys.argv[1:])
