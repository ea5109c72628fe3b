"""Ranges and patterns of config values, as metadata pydantic expands only when it builds a schema.

`annotated_types`' own `Ge(1)` objects are made when the schema module is imported: 13 ms of every
verdict, a cached one included, that reads no range (bench/verdict_time.py). A `Bound` carries the
same limits and makes those objects when pydantic iterates it, so the constraint is the same one.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["Bound"]


class Bound:
    """`Annotated[int, Bound(ge=1, le=65535)]`: the value's limits, checked when a composition is parsed."""

    # annotated_types' GroupedMetadata protocol: pydantic iterates any object marked so, and applies what it yields
    __is_annotated_types_grouped_metadata__ = True
    __slots__ = ("_interval", "_min_length", "_pattern")

    def __init__(
        self,
        *,
        ge: float | None = None,
        gt: float | None = None,
        le: float | None = None,
        min_length: int | None = None,
        pattern: str | None = None,
    ) -> None:
        self._interval = {name: limit for name, limit in (("ge", ge), ("gt", gt), ("le", le)) if limit is not None}
        self._min_length = min_length
        self._pattern = pattern

    def __iter__(self) -> Iterator[object]:
        import annotated_types

        if self._min_length is not None:
            yield annotated_types.MinLen(self._min_length)
        if self._pattern is not None:
            from pydantic import StringConstraints

            yield from StringConstraints(pattern=self._pattern)
        yield from annotated_types.Interval(**self._interval)

    def __str__(self) -> str:
        """The limits as an operator reads them (the config reference shows this): `≥ 1, ≤ 65535`."""
        signs = {"ge": "≥", "gt": ">", "le": "≤"}
        parts = [f"{signs[name]} {limit:g}" for name, limit in self._interval.items()]
        if self._min_length is not None:
            parts.append("non-empty" if self._min_length == 1 else f"at least {self._min_length} characters")
        if self._pattern is not None:
            parts.append(f"matches `{self._pattern}`")
        return ", ".join(parts)
