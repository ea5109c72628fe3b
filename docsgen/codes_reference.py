"""Reference: every validation code, found where it is made.

A code is the first argument of a `Problem(...)` (appliance/errors.py), or of a helper whose first parameter is
named `code`: the string literal there is the code's one source, so the table is read from the code with `ast`
(a code built with an f-string shows its varying part as `*`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from appliance.markdown import table

__all__ = ["Code", "codes_page", "find_codes"]


@dataclass(frozen=True, slots=True)
class Code:
    code: str
    severity: str
    where: str
    """`module.py:line` of the call that makes it."""
    key: str
    """The key or file it names, where the call spells it literally."""
    message: str
    """What it says, as the call spells it (`*` for each part filled in when it is made)."""


def find_codes(package: Path) -> tuple[Code, ...]:
    """Every code made under `package`, sorted by code then place."""
    trees = {path: ast.parse(path.read_text(), str(path)) for path in sorted(package.rglob("*.py"))}
    makers = {"Problem"} | {name for tree in trees.values() for name in _code_helpers(tree)}
    found = [
        code
        for path, tree in trees.items()
        for code in _calls(tree, makers, path.relative_to(package.parent).as_posix())
    ]
    return tuple(sorted(set(found), key=lambda c: (c.code, c.where)))


def codes_page(codes: tuple[Code, ...]) -> str:
    lines = [
        "# Every validation code",
        "",
        "Generated at build time from the code: each `error[code]` / "
        "`warning[code]` an operator can meet, where it is made and the key it names. What each means, grouped, "
        "is in [Validation and the fit](../concepts/validation.md).",
        "",
    ]
    rows = [
        (f"`{c.code}`", c.severity, f"`{c.key}`" if c.key else "", _brief(c.message), f"`{c.where}`") for c in codes
    ]
    return "\n".join([*lines, table(("code", "severity", "key", "message", "made at"), rows)]) + "\n"


def _code_helpers(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.args.args[:1]:
            yield from (node.name for first in node.args.args[:1] if first.arg == "code")


def _calls(tree: ast.Module, makers: set[str], module: str) -> Iterator[Code]:
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        if name not in makers:
            continue
        given = {k.arg: k.value for k in node.keywords if k.arg}
        args = [*node.args, *[None] * 5]
        code = _text(args[0] if node.args else given.get("code"))
        if code is None:
            continue
        severity = _text(given.get("severity") or args[4]) or "error"
        key = _text(args[1] if len(node.args) > 1 else given.get("key")) or ""
        message = _text(args[2] if len(node.args) > 2 else given.get("message")) or ""
        yield Code(code, severity, f"{module}:{node.lineno}", key, message)


def _text(node: ast.expr | None) -> str | None:
    """A string literal's value, an f-string with `*` for each formatted part; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(str(p.value) if isinstance(p, ast.Constant) else "*" for p in node.values)
    return None


def _brief(text: str) -> str:
    """At most about a line of text, for a table cell."""
    text = " ".join(text.split())
    return text if len(text) <= 140 else text[:139] + "…"
