"""The documentation site's build: reference pages and pictures made from the code (mkdocs hooks in `hook`).

`python -m docsgen` (what `make docs` runs) builds the site strictly and reports the first problem on one line.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["ROOT", "DocsError"]

ROOT = Path(__file__).resolve().parent.parent
"""The checkout: commands shown in the docs run here, and its path is shown as `<clone>`."""


class DocsError(Exception):
    """The site cannot be built as it stands; the message names the page, command or key, on one line."""
