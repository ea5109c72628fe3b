"""What every `appliance` subcommand module shares: the output consoles and config loading."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from appliance.errors import Problem

if TYPE_CHECKING:  # the stages are imported by the functions that run them: each command pays for its own
    from rich.console import Console

    from appliance.compat.fit import Fit
    from appliance.compat.matrix import CompatibilityMatrix
    from appliance.compat.validate import ValidatedConfig
    from appliance.config.schema import ComposedConfig
    from appliance.host.discovery import HostFacts

__all__ = ["Command", "Output", "composed_config", "err", "host_facts", "findings", "out", "validated_config"]


class Output:
    """One output stream: plain lines are written as they are, rich renders tables and JSON.

    Most commands print only plain lines (`markup=False`), and importing rich costs 28 ms of a
    verdict that is judged on 0.3 s (bench/verdict_time.py): it is imported for the first line
    that needs it.
    """

    def __init__(self, *, stderr: bool = False) -> None:
        self._stderr = stderr

    @cached_property
    def console(self) -> Console:
        from rich.console import Console

        console = Console(stderr=self._stderr, highlight=False, soft_wrap=True)
        if not console.is_terminal:
            # Off a terminal rich assumes 80 columns and cuts table cells to fit ("funct…"); a pipe or a
            # file has no width to fit, so every table keeps its cells whole (none of ours expands).
            console.width = _UNBOUNDED
        return console

    def print(self, *objects: object, markup: bool | None = None, end: str = "\n", **options: Any) -> None:
        if markup is False and not options and all(isinstance(o, str) for o in objects):
            stream = sys.stderr if self._stderr else sys.stdout
            stream.write(" ".join(map(str, objects)) + end)
            stream.flush()  # as rich does: lines on stdout and stderr keep their order in one pipe
        else:
            self.console.print(*objects, markup=markup, end=end, **options)

    def print_json(self, **options: Any) -> None:
        self.console.print_json(**options)


_UNBOUNDED = 100_000
out = Output()
err = Output(stderr=True)

Command = Callable[[str, Callable[[argparse.Namespace], int]], argparse.ArgumentParser]
"""Registers a subcommand: (name, handler) -> its parser, for the module to add arguments.

Its help text is in `appliance.cli.main`'s command table, which lists every command without importing it.
"""


def findings(problems: Sequence[Problem], fit: Fit | None = None) -> dict[str, Any]:
    items = [
        {
            "code": p.code,
            "severity": p.severity,
            "key": p.key,
            "message": p.message,
            "fix": p.fix,
            "rule": p.rule,
            "change": list(p.change),
        }
        for p in problems
    ]
    report: dict[str, Any] = {"ok": not any(p.severity == "error" for p in problems), "findings": items}
    if fit is not None:
        report["fit"] = {"bucket": fit.bucket, "reasons": list(fit.reasons), "unverified": list(fit.unverified)}
    return report


def composed_config(args: argparse.Namespace, matrix: CompatibilityMatrix) -> ComposedConfig:
    """The command line's overrides composed and resolved against this host (mesh=auto only)."""
    from appliance.compat.resolve import resolve_config

    return resolve_config(tuple(args.overrides), matrix, host_facts, site_dir=args.site_dir)


def host_facts() -> HostFacts:
    from appliance.host.discovery import discover_host  # here: only mesh=auto looks at the host (subprocess and all)

    return discover_host()


def validated_config(args: argparse.Namespace, matrix: CompatibilityMatrix) -> ValidatedConfig:
    """Composed, then validated under the pinned plugin state or the one `--against vllm=X` names."""
    from appliance.compat.validate import validate

    return validate(composed_config(args, matrix), matrix, against=getattr(args, "against", None))
