"""Rows of a DataTable kept by key: only a changed cell is updated (an unchanged one costs no re-measure, no redraw)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import DataTable

__all__ = ["Cells", "show_rows"]

Cells = tuple[str | Text, ...]


def show_rows(table: DataTable[str | Text], rows: Sequence[tuple[str, Cells]]) -> None:
    """Show `rows` (key, cells) in their order of arrival; a row whose key is no longer among them goes."""
    keys = {key for key, _ in rows}
    for gone in [k for k in table.rows if k.value not in keys]:
        table.remove_row(gone)
    for key, cells in rows:
        if key not in table.rows:
            table.add_row(*cells, key=key)
            continue
        for column, cell, old in zip(table.columns, cells, table.get_row(key), strict=True):
            if cell != old:
                table.update_cell(key, column, cell, update_width=True)
