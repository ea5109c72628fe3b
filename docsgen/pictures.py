"""Pictures made by the docs build from the real thing: the console, a load report's plots, commands' output.

- the console: the real `ConsoleApp`, driven by Textual's Pilot against the recorded appliance of the tests (the
  real control API over real HTTP, fed with captures: testkit/recorded_appliance.py), then Textual's own SVG export;
- a load report's plots: the `write_plots` that `appliance loadtest` uses, on a recorded report (docsgen/data/);
- a command's output: the command run in the checkout (docsgen.commands), drawn as a terminal by rich's SVG export.
"""

from __future__ import annotations

import asyncio
import io
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path

from rich.console import Console
from rich.text import Text

from docsgen import ROOT, DocsError
from docsgen.commands import WIDTH, run

__all__ = ["TERMINALS", "console_pictures", "plot_pictures", "terminal_pictures"]

FOLDER = "img/generated"
REPORT = ROOT / "docsgen" / "data" / "loadtest-mixed-tiny.json"
TERMINALS = {
    "plan-t3k.svg": "appliance plan +model=llama mesh=t3k",
    "check-t3k.svg": "appliance check --no-probe --host-root testkit/data/hosts/t3k +model=llama mesh=t3k",
}
"""Each command picture: its file under img/generated/ and the command line drawn."""
_CHECK_EXITS = {"check-t3k.svg": 1}  # the recorded host has no tt engine environment: a check fails, as it would


def terminal_pictures() -> Iterator[tuple[str, bytes]]:
    for name, command in TERMINALS.items():
        code, output = run(command)
        if code != _CHECK_EXITS.get(name, 0):
            raise DocsError(f"picture {name}: `{command}` exited {code}: {output.splitlines()[-1:]}")
        console = Console(record=True, width=WIDTH, file=io.StringIO(), force_terminal=True)
        console.print(Text(f"$ {command}", style="bold"))
        console.print(Text.from_ansi(output))
        yield f"{FOLDER}/{name}", console.export_svg(title=command.split(" +")[0]).encode()


def plot_pictures() -> Iterator[tuple[str, bytes]]:
    from appliance.loadtest.plots import write_plots
    from appliance.loadtest.report import load_report

    with tempfile.TemporaryDirectory() as folder:
        for path in write_plots([load_report(REPORT)], Path(folder)):
            yield f"{FOLDER}/loadtest-{path.name}", path.read_bytes()


def console_pictures() -> Iterator[tuple[str, bytes]]:
    """The dashboard of one recorded appliance, its config screen, and a site of two plus one that is gone."""
    from testkit.recorded_appliance import recorded_appliance

    with ExitStack() as stack:
        one, two = (stack.enter_context(recorded_appliance()) for _ in range(2))
        shots = asyncio.run(_shots(one, two))
    yield from ((f"{FOLDER}/{name}", svg.encode()) for name, svg in shots.items())


async def _shots(one: object, two: object) -> dict[str, str]:
    from appliance.control.client import Target
    from testkit.console_pilot import recorded_console
    from testkit.helpers import free_port

    gone = Target("gone", f"http://127.0.0.1:{free_port()}", "x")
    return {
        "console-appliance.svg": await _shot(recorded_console(one), polls=6, rows=30),  # type: ignore[arg-type]
        "console-config.svg": await _shot(recorded_console(one), polls=1, keys=("c",)),  # type: ignore[arg-type]
        "console-site.svg": await _shot(recorded_console(one, two, extra=[gone]), polls=4, rows=10),  # type: ignore[arg-type]
    }


async def _shot(app: object, polls: int, keys: Sequence[str] = (), rows: int = 44) -> str:
    """The console after `polls` polls (each shows the next recorded page) and `keys`, on a 140-column terminal."""
    from testkit.console_pilot import poll
    from tui.app import ConsoleApp

    assert isinstance(app, ConsoleApp)
    async with app.run_test(size=(140, rows)) as pilot:
        await poll(pilot, polls)
        await pilot.press(*keys)
        await pilot.pause()
        return app.export_screenshot(title="appliance console")
