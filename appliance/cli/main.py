"""`appliance` command line: the parser and error reporting; each command group has its own module.

Exit codes: 0 ok, 2 invalid config, 3 cannot launch here, 4 engine or API failure,
130/143 stopped by SIGINT/SIGTERM. APPLIANCE_DEBUG=1 shows tracebacks.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence

from appliance.errors import ApiError, ApplianceError, ConfigError, EngineError, HostRefusal, LaunchError

__all__ = ["COMMANDS", "command_parser", "main", "script"]

_EXIT = {ConfigError: 2, LaunchError: 3, EngineError: 4, ApiError: 4}

COMMANDS: dict[str, tuple[str, str]] = {
    "validate": ("config", "check a config against the matrix and the plugin contract (offline)"),
    "plan": ("config", "print the exact engine launch for a config"),
    "matrix": ("config", "print the compatibility matrix"),
    "options": ("config", "list the options of every config group"),
    "serve": ("serve", "boot and supervise the engine with the control API"),
    "status": ("serve", "print the state of a running appliance"),
    "drain": ("serve", "drain a running appliance: out of rotation, in-flight requests finish"),
    "upgrade": ("upgrade", "upgrade a running appliance in place behind gates; rolled back if one fails"),
    "console": ("console", "live operator console (Textual) for one appliance or a site"),
    "build": ("deploy", "build an engine environment from its pins, then write its manifest"),
    "manifest": ("deploy", "the engine environment: pins vs installed, config hash, host"),
    "render": (
        "deploy",
        "deployment files: k8s manifests, a systemd unit, a site's Ansible roll, Prometheus rules or "
        "its Grafana dashboard",
    ),
    "sites": ("deploy", "list sites with their effective overrides"),
    "gateway": ("gateway", "front a site's appliances with HAProxy (readiness-gated)"),
    "check": ("check", "host preflight and the five-point pilot checklist, with a report"),
    "api-contract": ("check", "record a running engine's client contract (OpenAPI)"),
    "loadtest": ("load", "drive a workload (conf/workload) at an OpenAI server and report"),
    "compare": ("load", "two load reports side by side, with deltas and plots"),
    "eval": ("quality", "ask a served model the evaluation set; report its accuracy"),
    "fetch": ("weights", "bring a config's pinned checkpoint into the model store, verified against its lock"),
    "store": ("weights", "list the host's model store (revisions, sizes, lock state, users) or prune it"),
}
"""Every command: the `appliance.cli` module that registers it, and its help text.

`--help` lists them all from here; only the module of the command being run is imported, so a
verdict never pays for the serving, console or load-test code.
"""


def script() -> int:
    """The `appliance` console script: `main` as a process of its own, its cyclic collector set for one life.

    A command's modules make objects that live until exit. The collector would traverse them in each full
    collection while they import and once more as the interpreter exits: a tenth of an unseen verdict. So it
    is off while they import, what they made is frozen (never traversed again) before the command runs, and
    the heap is frozen once more before exit. Only the process's own entry may: frozen objects are never
    freed, which an in-process caller of `main` (the tests) would leak.
    """
    gc.disable()
    args = _parse(None)
    gc.freeze()
    gc.enable()
    try:
        return _run(args)
    finally:
        gc.freeze()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command: `argv`, or the process's arguments."""
    return _run(_parse(argv))


def command_parser(name: str) -> argparse.ArgumentParser:
    """The parser `appliance <name>` runs with, its flags registered by the command's module (the docs read it)."""
    parser = _parser(name)
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found: argparse.ArgumentParser = sub.choices[name]
    return found


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    return _parser(_wanted(argv)).parse_args(argv)


def _run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per health probe is noise
    try:
        code: int = args.run(args)
        return code
    except ApplianceError as error:
        if os.environ.get("APPLIANCE_DEBUG") == "1":
            raise
        _report(error, getattr(args, "json", False))
        return next(code for kind, code in _EXIT.items() if isinstance(error, kind))


def _report(error: ApplianceError, as_json: bool) -> None:
    from appliance.cli.common import err, findings, out

    if isinstance(error, (ConfigError, HostRefusal)):
        if as_json:
            out.print_json(data=findings(error.problems))
        for problem in error.problems:
            err.print(problem.render(), markup=False)
    else:
        err.print(f"error: {error}", markup=False)


def _wanted(argv: Sequence[str] | None) -> str | None:
    """The command named on the command line (its first word), if any."""
    words = list(sys.argv[1:] if argv is None else argv)
    return words[0] if words and not words[0].startswith("-") else None


def _parser(wanted: str | None = None) -> argparse.ArgumentParser:
    """The `wanted` command's group, registered by its module; without a known command, every command, listed.

    A command's run never shows its siblings, and each parser argparse builds costs a verdict about
    0.3 ms (its translated help strings are looked up afresh each time).
    """
    parser = argparse.ArgumentParser(prog="appliance", description="Config-driven vLLM serving for Tenstorrent")
    sub = parser.add_subparsers(required=True, metavar="command")

    def command(name: str, run: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        text = COMMANDS[name][1]
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.set_defaults(run=run)
        return cmd

    if wanted in COMMANDS:
        importlib.import_module(f"appliance.cli.{COMMANDS[wanted][0]}").register(command)
        return parser
    for name, (_, text) in COMMANDS.items():
        sub.add_parser(name, help=text, description=text)  # for --help and "invalid choice"; never run
    return parser
