"""Commands shown in the docs with their real output: run at build time, never pasted.

A page asks for one with a comment of its own line, `<!-- run: appliance plan mesh=t3k -->` (the command must exit
0) or `<!-- run exit=1: appliance check ... -->`; the build replaces it with the command and what it printed.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

from docsgen import ROOT, DocsError

__all__ = ["expand_runs", "run"]

_DIRECTIVE = re.compile(r"^<!-- run(?: exit=(?P<exit>\d+))?: (?P<command>.+?) -->$", re.M)
WIDTH = 110
"""The terminal width the commands see: their tables fit it, as on an operator's terminal."""


@cache
def run(command: str, color: bool = False) -> tuple[int, str]:
    """Exit code and output (stdout and stderr as they came) of an `appliance …` command line run in the checkout."""
    words = shlex.split(command)
    if words[0] != "appliance":
        raise DocsError(f"`{command}`: only appliance commands run in the docs")
    env = {**os.environ, "COLUMNS": str(WIDTH), "LINES": "50", "APPLIANCE_DEBUG": "0"}
    env.pop("NO_COLOR" if color else "FORCE_COLOR", None)
    env["FORCE_COLOR" if color else "NO_COLOR"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "appliance.cli", *words[1:]],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        check=False,
    )
    output = done.stdout.replace(str(ROOT), "<clone>").replace(str(Path.home()), "~")
    return done.returncode, output.rstrip()


def expand_runs(markdown: str, page: str) -> str:
    """`markdown` with every run comment replaced by a console block; DocsError when a command's exit is not the
    one the page expects."""

    def block(match: re.Match[str]) -> str:
        command, expected = match["command"], int(match["exit"] or 0)
        code, output = run(command)
        if code != expected:
            last = output.splitlines()[-1] if output else "no output"
            raise DocsError(f"{page}: `{command}` exited {code}, not {expected}: {last}")
        shown = f"$ {command}\n{output}" + (f"\n(exit {code})" if code else "")
        return f"```console\n{shown}\n```"

    return _DIRECTIVE.sub(block, markdown)
