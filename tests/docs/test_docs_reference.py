"""The generated reference pages read the code's own sources: the parser, the schema, the codes, the registry."""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import re

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from appliance.cli.main import COMMANDS, command_parser
from appliance.config.schema import ApplianceConfig, HostShare
from docsgen import DocsError
from docsgen.cli_reference import cli_page
from docsgen.codes_reference import find_codes
from docsgen.config_reference import config_page, docstrings
from docsgen.metrics_reference import find_series
from testkit.paths import ROOT
from testkit.recorded_appliance import recorded_api


def test_the_command_page_lists_every_flag_of_every_command() -> None:
    page = cli_page(COMMANDS, command_parser)
    for name in COMMANDS:
        for action in command_parser(name)._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            shown = action.option_strings[0] if action.option_strings else None
            assert shown is None or f"`{shown}" in page, f"appliance {name} {shown}"


def test_a_flag_without_help_text_is_refused_naming_it() -> None:
    parser = argparse.ArgumentParser(description="do a thing")
    parser.add_argument("--quietly", action="store_true")
    with pytest.raises(DocsError, match=r"^`appliance thing --quietly` has no help text"):
        cli_page(["thing"], lambda _: parser)


def test_every_schema_field_has_its_docstring_found() -> None:
    assert docstrings(HostShare)["reserve_cores"].startswith("Cores kept from the engine")
    page = config_page(ApplianceConfig, {"serving.port": 8000}, {"mesh": ("n150", "t3k")})
    assert "one of `mesh=n150`, `mesh=t3k`" in page
    assert "| `serving.port` | int, ≥ 1, ≤ 65535 | `8000` | `8000` | Port of the engine's OpenAI API" in page


def test_a_key_without_a_description_is_refused_naming_it() -> None:
    @dataclasses.dataclass(frozen=True)
    class Undocumented:
        knob: int = 1

    with pytest.raises(DocsError, match=r"^config key knob has no description"):
        config_page(Undocumented, {}, {})


def test_the_codes_are_found_where_they_are_made() -> None:
    codes = {c.code: c for c in find_codes(ROOT / "appliance")}
    assert codes["host-share-no-core"].where.startswith("appliance/preflight/launch.py:")
    assert codes["host-share-no-core"].key == "engine.host_share.reserve_cores"
    assert codes["open-without-api-key"].severity == "warning"
    assert {"unknown-key", "secret-by-value", "engine-refused", "slot-*-overlap"} <= set(codes)


async def test_a_real_scrape_shows_no_series_the_reference_lacks() -> None:
    """Recorded appliance (testkit/recorded_appliance.py): its registry's exposition against the declared series."""
    declared = {s.name for s in find_series(ROOT / "appliance" / "control" / "metrics.py")}
    with recorded_api("t") as api:
        transport = httpx.ASGITransport(app=api.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://control") as client:
            page = (await client.get("/metrics", headers={"Authorization": "Bearer t"})).text
    # prometheus_client's Counter adds a `_created` timestamp to its `_total`: the same series' start time
    names = {s.name for f in text_string_to_metric_families(page) for s in f.samples if s.name.startswith("appl")}
    exposed = {name.removesuffix("_created") + "_total" if name.endswith("_created") else name for name in names}
    assert exposed and exposed <= declared, exposed - declared


def test_every_code_the_validation_page_explains_is_still_made() -> None:
    """docs/concepts/validation.md explains the codes in groups, by hand: a code it names must still exist."""
    made = {c.code for c in find_codes(ROOT / "appliance")}
    page = (ROOT / "docs" / "concepts" / "validation.md").read_text()
    named = {
        code for row in re.findall(r"^\| (.+?) \|", page, flags=re.M) for code in re.findall(r"`([a-z0-9-]+)`", row)
    }
    assert named, "the validation page has no code table"
    gone = {code for code in named if code not in made and not any(fnmatch.fnmatch(code, m) for m in made)}
    assert not gone, f"docs/concepts/validation.md explains codes nothing makes: {sorted(gone)}"


def test_the_hand_written_tables_name_only_what_the_code_has() -> None:
    """The guides' tables explain commands and series by hand; the names they use must be the code's."""
    commands = (ROOT / "docs" / "reference" / "commands.md").read_text()
    listed = set(re.findall(r"^\| `appliance ([a-z-]+)", commands, flags=re.M))
    assert listed == set(COMMANDS)
    guide = (ROOT / "docs" / "guides" / "prometheus-grafana.md").read_text()
    named = {n for row in re.findall(r"^\| (`appliance_.+?) \|", guide, flags=re.M) for n in re.findall(r"`(\w+)", row)}
    declared = {s.name for s in find_series(ROOT / "appliance" / "control" / "metrics.py")}
    assert named == declared
