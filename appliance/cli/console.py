"""console: the live operator console (Textual), for one appliance or a whole site.

The console lives in `tui/`, above the package: it registers itself under the
`appliance.console` entry point, so nothing in `appliance` imports Textual or `tui`.
"""

from __future__ import annotations

import argparse
import logging
from importlib.metadata import entry_points
from pathlib import Path

from appliance.cli.common import Command
from appliance.cli.serve import control_token
from appliance.control.client import Target, expand_slots
from appliance.control.site_file import load_site_file, target
from appliance.errors import ConfigError, LaunchError, Problem

__all__ = ["register"]


def _cmd_console(args: argparse.Namespace) -> int:
    entries = load_site_file(args.site_file) if args.site_file else ()
    urls = args.url or ([] if entries else ["http://127.0.0.1:8100"])
    token = control_token(args) if urls else ""
    targets = [target(e) for e in entries] + [
        Target(u.split("//")[-1].rstrip("/"), u.rstrip("/"), token, args.ca_file) for u in urls
    ]
    targets = [slot for t in targets for slot in expand_slots(t)]
    if len({t.name for t in targets}) != len(targets):
        raise ConfigError(
            (
                Problem(
                    code="duplicate-appliance",
                    key="--url",
                    message="an appliance is listed twice",
                    fix="List each once",
                ),
            )
        )
    found = entry_points(group="appliance.console", name="textual")
    if not found:
        raise LaunchError("the operator console is not installed (entry point appliance.console:textual): reinstall")
    run = next(iter(found)).load()
    # The terminal belongs to the console while it runs: a log line on stderr would tear its screen.
    logging.getLogger().handlers = [logging.NullHandler()]
    run(targets, read_only=args.read_only, refresh_s=args.refresh, gateway_metrics=args.gateway_metrics)
    return 0


def register(command: Command) -> None:
    """console."""
    console = command("console", _cmd_console)
    console.add_argument("--url", action="append", help="control API URL; repeat for several appliances")
    console.add_argument("--site-file", type=Path, help="YAML list of {name, url, token_env}")
    console.add_argument("--read-only", action="store_true", help="disable drain and restart")
    console.add_argument("--refresh", type=float, default=1.0, help="seconds between polls (default 1)")
    console.add_argument("--token-env", default="APPLIANCE_TOKEN", help="env var with the token for --url")
    console.add_argument("--token-file", help="token file that `serve` printed, for --url")
    # A flag, not a site-file key: the site file is a list of appliances (read by `gateway` and `render` too), and
    # the gateway's exporter is named by flag wherever else it appears (`gateway --metrics-listen`, `render --gateway`).
    console.add_argument(
        "--gateway-metrics",
        metavar="URL",
        help="the site gateway's exporter (e.g. http://127.0.0.1:8405/metrics): the fleet shows each model's queue "
        "and admitted and shed rates",
    )
    console.add_argument("--ca-file", help="CA bundle that verifies an https --url (control.tls)")
