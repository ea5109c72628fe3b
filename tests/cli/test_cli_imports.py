"""The parser lists every command but imports only the group of the command being run; the console script
freezes what that import made, and only it does.

Each check runs a fresh interpreter: in this test process other tests have imported everything already.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import pytest

from appliance.cli.main import COMMANDS, _parser, main

# What a verdict must not pay for: serving, the control client and its HTTP stack, the console, load tests.
HEAVY = (
    "httpx",
    "uvicorn",
    "starlette",
    "textual",
    "appliance.control",
    "appliance.serve",
    "appliance.runtime",
    "appliance.loadtest",
    "appliance.deploy",
    "appliance.engines",
    "appliance.preflight",
    "appliance.quality",
    "appliance.plan",
    "appliance.slots.plan",
)


def _modules_after_parser(wanted: str | None) -> set[str]:
    code = (
        "import json, sys\nfrom appliance.cli.main import _parser\n"
        f"_parser({wanted!r})\nprint(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(done.stdout))


def _loaded(modules: set[str], prefixes: tuple[str, ...]) -> set[str]:
    return {m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)}


def test_the_help_parser_imports_no_command_group_and_no_hydra() -> None:
    modules = _modules_after_parser(None)
    assert not _loaded(modules, ("hydra", "omegaconf", "pydantic", "rich", *HEAVY))
    assert not {m for m in modules if m.startswith("appliance.cli.") and m != "appliance.cli.main"}


@pytest.mark.parametrize("command", ["validate", "plan"])
def test_validate_and_plan_parsers_import_none_of_the_serving_code(command: str) -> None:
    assert not _loaded(_modules_after_parser(command), HEAVY)


def test_help_lists_every_command() -> None:
    listed = next(a for a in _parser()._actions if a.dest == "command" or a.choices).choices or {}
    assert list(listed) == list(COMMANDS)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_listed_command_is_registered_by_its_module(command: str) -> None:
    """The table names the right module: building the parser for `command` gives it its handler."""
    parser = _parser(command)
    sub = next(a for a in parser._actions if a.dest == "command" or a.choices)
    assert sub.choices is not None
    assert callable(sub.choices[command].get_default("run"))


def test_the_console_script_freezes_its_commands_objects_and_leaves_the_collector_on() -> None:
    """What a long-running command makes after its modules imported is still collected; they are not traversed."""
    code = (
        "import atexit, gc, json, sys\n"
        "atexit.register(lambda: print(json.dumps([gc.isenabled(), gc.get_freeze_count()])))\n"
        "from appliance.cli.main import script\nsys.argv = ['appliance', 'options']\nsys.exit(script())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    enabled, frozen = json.loads(done.stdout.splitlines()[-1])
    assert enabled
    assert frozen > 10_000  # the parser's, the config group's and Hydra's modules


def test_main_in_process_leaves_the_collector_as_it_found_it(capsys: pytest.CaptureFixture[str]) -> None:
    """An in-process caller (these tests) would leak whatever `main` froze: only the script may freeze."""
    frozen = gc.get_freeze_count()
    assert main(["options"]) == 0
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen
