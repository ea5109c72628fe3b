"""`appliance` command line: the parser and error reporting; each command group has its own module.

Exit codes: 0 ok, 2 invalid config, 3 cannot launch here, 4 engine or API failure,
130/143 stopped by SIGINT/SIGTERM. APPLIANCE_DEBUG=1 shows tracebacks.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Sequence

from appliance.cli import check, config, console, deploy, gateway, load, quality, serve
from appliance.cli.common import err, findings, out
from appliance.errors import ApiError, ApplianceError, ConfigError, EngineError, LaunchError

__all__ = ["main"]

_EXIT = {ConfigError: 2, LaunchError: 3, EngineError: 4, ApiError: 4}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `appliance` console script."""
    args = _parser().parse_args(argv)
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
    if isinstance(error, ConfigError):
        if as_json:
            out.print_json(data=findings(error.problems))
        for problem in error.problems:
            err.print(problem.render(), markup=False)
    else:
        err.print(f"error: {error}", markup=False)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="appliance", description="Config-driven vLLM serving for Tenstorrent")
    sub = parser.add_subparsers(required=True, metavar="command")

    def command(name: str, run: Callable[[argparse.Namespace], int], text: str) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.set_defaults(run=run)
        return cmd

    for module in (config, serve, console, deploy, gateway, check, load, quality):
        module.register(command)
    return parser
