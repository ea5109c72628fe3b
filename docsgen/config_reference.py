"""Reference: every config key with its type, default, range and description, read from the schema.

The schema's frozen dataclasses are the one source: a field's type and `Bound` give the range, its default the
default, and the string literal under it (its attribute docstring) the description, found in the class's source.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal, Union

from appliance.markdown import table
from docsgen import DocsError

__all__ = ["config_page", "docstrings"]


def config_page(root: type, embedded: Mapping[str, object], options: Mapping[str, tuple[str, ...]]) -> str:
    """The page: a table per section (`model`, `mesh`, …); `embedded` is each key's value in the embedded default
    (the composed conf/), `options` each config group's options. DocsError names the first key without a
    description."""
    lines = [
        "# Every config key",
        "",
        "Generated at build time from `appliance/config/schema.py`: each key's type and "
        "range as composition enforces them, its schema default, its value in the embedded default (`conf/`, "
        "what `make serve` runs) and its description (the field's docstring).",
        "",
    ]
    for section, rows in _sections(root):
        lines += [f"## `{section}`" if section != _TOP else f"## {section}", ""]
        if section in options:
            choices = ", ".join(f"`{section}={o}`" for o in options[section])
            lines += [f"A config group: one of {choices} (`conf/{section}/`) sets these keys.", ""]
        cells = [
            (f"`{key}`", _type(hint), default, f"`{embedded[key]}`" if key in embedded else "", text)
            for key, hint, default, text in rows
        ]
        lines += [table(("key", "type and range", "default", "embedded", "description"), cells), ""]
    return "\n".join(lines) + "\n"


def docstrings(cls: type) -> dict[str, str]:
    """Each field's attribute docstring: the string literal right under its annotation in the class body."""
    (node,) = ast.parse(textwrap.dedent(inspect.getsource(cls))).body
    assert isinstance(node, ast.ClassDef)
    found = {}
    for field, after in zip(node.body, node.body[1:], strict=False):
        name = field.target.id if isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name) else None
        if name and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            found[name] = " ".join(str(after.value.value).split())
    return found


Row = tuple[str, Any, str, str]
_TOP = "Top-level keys"


def _sections(root: type) -> Iterator[tuple[str, list[Row]]]:
    hints = typing.get_type_hints(root, include_extras=True)
    texts = docstrings(root)
    loose: list[Row] = []
    for field in dataclasses.fields(root):
        kind = _dataclass(hints[field.name])
        if kind is not None and field.name not in texts:
            yield field.name, list(_rows(kind, field.name))
        else:
            loose += _field_rows(root, field, hints[field.name], texts, "")
    if loose:
        yield _TOP, loose


def _rows(cls: type, prefix: str) -> Iterator[Row]:
    hints = typing.get_type_hints(cls, include_extras=True)
    texts = docstrings(cls)
    for field in dataclasses.fields(cls):
        yield from _field_rows(cls, field, hints[field.name], texts, prefix + ".")


def _field_rows(cls: type, field: dataclasses.Field[Any], hint: Any, texts: dict[str, str], prefix: str) -> list[Row]:
    key = prefix + field.name
    if field.name not in texts:
        raise DocsError(
            f"config key {key} has no description: add a docstring under {cls.__name__}.{field.name} "
            "in appliance/config/schema.py"
        )
    rows: list[Row] = [(key, hint, _default(field), texts[field.name])]
    kind = _dataclass(hint)
    return rows + list(_rows(kind, key)) if kind is not None else rows


def _dataclass(hint: Any) -> type | None:
    """The dataclass a field holds (`X` or `X | None`), if it holds one."""
    options = typing.get_args(hint) if _is_union(hint) else (hint,)
    found = [o for o in options if isinstance(o, type) and dataclasses.is_dataclass(o)]
    return found[0] if found else None


def _default(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        return f"`{field.default}`" if not isinstance(field.default, tuple) else f"`{list(field.default)}`"
    if field.default_factory is not dataclasses.MISSING:
        made = field.default_factory()
        return "" if dataclasses.is_dataclass(made) else f"`{made}`"
    return "required"


def _type(hint: Any, inner: bool = False) -> str:
    """`int, ≥ 1, ≤ 65535`, `one of tt, cpu`, `str or null`, `mapping of str (matches …) to str`, …"""
    if typing.get_origin(hint) is Annotated:
        base, *meta = typing.get_args(hint)
        limits = ", ".join(str(m) for m in meta)
        if not limits:
            return _type(base, inner)
        return f"{_type(base, True)} ({limits})" if inner else f"{_type(base)}, {limits}"
    if typing.get_origin(hint) in (Mapping, dict):
        key, value = typing.get_args(hint)
        return f"mapping of {_type(key, True)} to {_type(value, True)}"
    if typing.get_origin(hint) is tuple:
        items = [a for a in typing.get_args(hint) if a is not Ellipsis]
        if Ellipsis in typing.get_args(hint):
            return f"list of {_type(items[0], True)}"
        return f"pair of {_type(items[0], True)}" if len(set(items)) == 1 and len(items) == 2 else str(hint)
    if _is_union(hint):
        parts = [a for a in typing.get_args(hint) if a is not type(None)]
        text = " or ".join(_type(p) for p in parts)
        return f"{text} or null" if len(parts) < len(typing.get_args(hint)) else text
    if typing.get_origin(hint) is Literal:
        return "one of " + ", ".join(f"`{v}`" for v in typing.get_args(hint))
    if hint is Any:
        return "any value"
    return getattr(hint, "__name__", str(hint))


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (Union, types.UnionType)
