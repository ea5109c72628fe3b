"""Reference: every command and flag, read from the parser `appliance` itself runs with."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable

from appliance.markdown import table
from docsgen import DocsError

__all__ = ["cli_page"]


def cli_page(commands: Iterable[str], parser_of: Callable[[str], argparse.ArgumentParser]) -> str:
    """The page: per command its help text, usage and a table of its arguments; DocsError naming the first command
    or flag without help text."""
    lines = ["# Every command and flag", "", "Generated from `appliance`'s own argparse parsers at build time.", ""]
    for name in commands:
        lines += _command(name, parser_of(name))
    return "\n".join(lines) + "\n"


def _command(name: str, parser: argparse.ArgumentParser) -> list[str]:
    if not parser.description:
        raise DocsError(f"command `appliance {name}` has no help text: give it one in appliance/cli/main.py COMMANDS")
    usage = " ".join(parser.format_usage().split()).removeprefix("usage: ")
    rows = [_row(name, action) for action in parser._actions if not isinstance(action, argparse._HelpAction)]
    arguments = table(("argument", "default", "meaning"), rows) if rows else "(no arguments)"
    return [f"## appliance {name}", "", parser.description, "", "```text", usage, "```", "", arguments, ""]


def _row(command: str, action: argparse.Action) -> tuple[str, str, str]:
    flag = ", ".join(action.option_strings) or (action.metavar if isinstance(action.metavar, str) else action.dest)
    if not action.help or action.help == argparse.SUPPRESS:
        raise DocsError(f"`appliance {command} {flag}` has no help text: pass help= where it is added")
    if isinstance(action.choices, range):
        flag += f" {{{action.choices.start}..{action.choices.stop - 1}}}"
    elif action.choices:
        flag += " {" + ",".join(map(str, action.choices)) + "}"
    switch = isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction))
    default = "" if switch or action.default in (None, argparse.SUPPRESS) else f"`{action.default}`"
    return f"`{flag}`", default, action.help
