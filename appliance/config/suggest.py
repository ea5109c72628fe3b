"""The fix for a typo: the nearest valid names, and the file and line that set the wrong one.

Only refusals call these (a composition that passed never does): the schema walk and the YAML
compose cost milliseconds a cached verdict does not spend.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["did_you_mean", "nearest", "schema_keys", "yaml_line"]


def nearest(name: str, candidates: Iterable[str]) -> tuple[str, ...]:
    """Up to three of `candidates` closest to `name`, closest first: difflib's ratio at least 0.6 and
    within 0.1 of the best (a clear winner is named alone)."""
    import difflib  # here: a composition that passed never suggests

    found = difflib.get_close_matches(name, sorted(set(candidates)), n=3)
    scores = [difflib.SequenceMatcher(None, name, c).ratio() for c in found]
    return tuple(c for c, score in zip(found, scores, strict=True) if score >= scores[0] - _MARGIN)


_MARGIN = 0.1


def did_you_mean(name: str, candidates: Iterable[str], spell: str = "`{}`") -> str:
    """ "Did you mean `a` or `b`? " for the nearest candidates (each written as `spell`), "" when none is near."""
    found = [spell.format(c) for c in nearest(name, candidates)]
    return f"Did you mean {' or '.join(found)}? " if found else ""


@cache
def schema_keys() -> frozenset[str]:
    """Every dotted key the config schema has, its sections included (`serving`, `serving.port`)."""
    from appliance.config.schema import ApplianceConfig

    return frozenset(_keys(ApplianceConfig, ""))


def _keys(shape: type[Any], prefix: str) -> Iterable[str]:
    hints = typing.get_type_hints(shape)
    for item in dataclasses.fields(shape):
        key = f"{prefix}{item.name}"
        yield key
        nested = _dataclass_in(hints[item.name])
        if nested is not None:
            yield from _keys(nested, f"{key}.")


def _dataclass_in(hint: Any) -> type[Any] | None:
    """The dataclass a field holds, through Annotated[...] and `X | None`; None for any other type."""
    if typing.get_origin(hint) is typing.Annotated:
        return _dataclass_in(typing.get_args(hint)[0])
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return next((d for a in typing.get_args(hint) if (d := _dataclass_in(a)) is not None), None)
    return hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None


def yaml_line(path: Path, key: str) -> int | None:
    """The 1-based line of the YAML key that sets dotted `key` in `path`, else None.

    A mapping key may itself hold dots (a slots file's `set: {serving.port: 8001}`), and a group
    option's file omits its group (`model/tiny.yaml` sets `model.checkpoint` as `checkpoint`).
    """
    import yaml

    try:
        root = yaml.compose(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    parts = key.split(".")
    return _line(root, parts) or _line(root, parts[1:])


def _line(node: Any, parts: list[str]) -> int | None:
    import yaml

    if not parts or not isinstance(node, yaml.MappingNode):
        return None
    for name_node, value in node.value:
        name = str(name_node.value).split(".")
        if parts[: len(name)] == name:
            rest = parts[len(name) :]
            found = name_node.start_mark.line + 1 if not rest else _line(value, rest)
            if found is not None:
                return found
    return None
