"""`appliance eval`: ask a served model the appliance's evaluation set and report its accuracy."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic_core import to_jsonable_python
from rich.table import Table

from appliance.cli.common import Command, out, validated_config
from appliance.compat.matrix import load_matrix
from appliance.errors import ConfigError, Problem
from appliance.plan import build_plan

if TYPE_CHECKING:
    from appliance.quality.run import EvalReport

__all__ = ["register"]

_REPLY_WIDTH = 70


def _cmd_eval(args: argparse.Namespace) -> int:
    """Exit 1 when the accuracy is below --min-accuracy."""
    import asyncio

    from appliance.quality.evalset import load_eval_set
    from appliance.quality.run import run_eval

    if args.min_accuracy is not None and not 0.0 <= args.min_accuracy <= 1.0:
        problem = Problem(
            code="bad-option",
            key="--min-accuracy",
            message=f"{args.min_accuracy} is not a share",
            fix="Use 0 to 1, e.g. 0.6",
        )
        raise ConfigError((problem,))
    evalset = load_eval_set(args.set)
    validated = validated_config(args, load_matrix())
    url = (args.url or build_plan(validated).base_url).rstrip("/")
    key_env = validated.config.serving.api_key_env
    report = asyncio.run(run_eval(evalset, url, api_key_env=key_env, concurrency=args.concurrency))
    if args.json:
        out.print_json(data=to_jsonable_python(report) | {"correct": report.correct, "accuracy": report.accuracy})
    else:
        _print_report(report)
    return 1 if args.min_accuracy is not None and report.accuracy < args.min_accuracy else 0


def _print_report(report: EvalReport) -> None:
    table = Table("", "question", "expected", "reply")
    for result in report.results:
        reply = " ".join(result.reply.split())
        reply = reply if len(reply) <= _REPLY_WIDTH else reply[: _REPLY_WIDTH - 1] + "…"
        table.add_row(
            "[green]✓[/]" if result.correct else "[red]✗[/]", result.question, " / ".join(result.answers), reply
        )
    out.print(table)
    out.print(
        f"accuracy {report.correct}/{len(report.results)} ({report.accuracy:.0%}) on {report.eval_set}: "
        f"{report.model} at {report.url}, greedy, {report.duration_s:.1f} s",
        markup=False,
    )


def register(command: Command) -> None:
    """eval: the evaluation set through a served OpenAI endpoint, reported as accuracy."""
    from appliance.quality.evalset import DEFAULT_EVAL_SET

    cmd = command("eval", _cmd_eval)
    cmd.add_argument("overrides", nargs="*", help="Hydra overrides (the engine URL and API key come from them)")
    cmd.add_argument("--site-dir", type=Path, default=None, help="directory of fleet site files")
    cmd.add_argument("--url", help="OpenAI API base URL (default: this config's engine)")
    cmd.add_argument("--set", type=Path, default=DEFAULT_EVAL_SET, help="evaluation set (build/eval/basic.yaml)")
    cmd.add_argument("--concurrency", type=int, default=4, help="questions in flight at once")
    cmd.add_argument("--min-accuracy", type=float, help="exit 1 below this share of correct answers (0 to 1)")
    cmd.add_argument("--json", action="store_true", help="the report, every reply included, as JSON")
