"""The one Markdown table writer: the pilot report and the load reports both use it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["cell", "table"]


def cell(text: str) -> str:
    """Text safe inside one table cell: a `|` would end the cell and a newline the row."""
    return text.replace("|", "\\|").replace("\n", " ")


def table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table, every cell escaped."""
    lines = [_row(head), "|" + "---|" * len(head)]
    lines += [_row(r) for r in rows]
    return "\n".join(lines)


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cell(c) for c in cells) + " |"
