"""MkDocs hooks (mkdocs.yml `hooks:`): the pages and pictures the build makes from the code.

`on_files` adds the generated reference pages and pictures (never committed: each build makes them afresh);
`on_page_markdown` replaces each `<!-- run: … -->` comment with the command and its real output.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

from docsgen import ROOT
from docsgen.commands import expand_runs

__all__ = ["on_files", "on_page_markdown"]


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for path, content in _generated():
        files.append(File.generated(config, path, content=content))
    return files


def on_page_markdown(markdown: str, page: Page, **_: Any) -> str:
    return expand_runs(markdown, page.file.src_uri)


def _generated() -> Iterator[tuple[str, str | bytes]]:
    from appliance.cli.main import COMMANDS, command_parser
    from appliance.config.schema import ApplianceConfig
    from docsgen import pictures
    from docsgen.cli_reference import cli_page
    from docsgen.codes_reference import codes_page, find_codes
    from docsgen.config_reference import config_page
    from docsgen.flags_reference import flags_page
    from docsgen.metrics_reference import find_series, metrics_page

    yield "reference/cli.md", cli_page(COMMANDS, command_parser)
    yield "reference/config.md", config_page(ApplianceConfig, _embedded(), _options())
    yield "reference/codes.md", codes_page(find_codes(ROOT / "appliance"))
    yield "reference/engine-flags.md", flags_page()
    yield "reference/metrics.md", metrics_page(find_series(ROOT / "appliance" / "control" / "metrics.py"))
    yield from pictures.terminal_pictures()
    yield from pictures.plot_pictures()
    yield from pictures.console_pictures()


def _embedded() -> dict[str, object]:
    """Every key's value in the embedded default: conf/ composed with no override, as `make serve` runs it."""
    from appliance.config.compose import compose_config

    home = str(Path.home())
    return {
        key: str(value).replace(home, "~") for key, value in _flat(dataclasses.asdict(compose_config([]).config), "")
    }


def _options() -> dict[str, tuple[str, ...]]:
    from appliance.config.compose import GROUPS, group_options

    return {group: group_options(group) for group in GROUPS}


def _flat(tree: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, object]]:
    for key, value in tree.items():
        yield prefix + key, value
        if isinstance(value, Mapping) and value and key not in ("env", "secret_env", "tt"):
            yield from _flat(value, f"{prefix}{key}.")
