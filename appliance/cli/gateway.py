"""gateway: one OpenAI endpoint for a site's appliances, HAProxy routing by model and admitting within the SLO."""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from appliance.cli.common import Command, err, out

if TYPE_CHECKING:
    from appliance.control.site_file import SiteEntry
    from appliance.deploy.gateway import Backend

__all__ = ["register"]


def _cmd_gateway(args: argparse.Namespace) -> int:
    from appliance.config.compose import compose_config
    from appliance.control.site_file import load_site_file
    from appliance.deploy.gateway import render_gateway, run_haproxy, write_gateway
    from appliance.deploy.gateway_classes import ClassCounts, counting_classes
    from appliance.deploy.gateway_clients import read_client_keys
    from appliance.preflight.launch import secrets_from_dir

    # Control tokens mounted as files (a Kubernetes Secret, `render gateway-k8s`) as the variables they are named by.
    os.environ.update(secrets_from_dir(os.environ))
    gateway = compose_config(args.overrides, site_dir=args.site_dir).config.gateway
    clients = read_client_keys(gateway.clients)
    backends = [b for entry in load_site_file(args.site_file) for b in _engines(entry)]
    # A dry run writes nothing: its config names the files as they would lie under --out (or ./appliance-gateway).
    folder = args.out or (
        Path("appliance-gateway") if args.dry_run else Path(tempfile.mkdtemp(prefix="appliance-gateway-"))
    )
    files = render_gateway(
        backends, args.listen, folder.absolute(), gateway, clients, args.check_interval_ms, args.metrics_listen
    )
    if args.dry_run:
        out.print(files.config, markup=False, end="")
        return 0
    config = write_gateway(files, folder)
    counts = ClassCounts([r.model for r in files.routes], gateway.classes)
    with counting_classes(folder.absolute(), counts):  # bound before HAProxy starts logging to it
        proc = run_haproxy(config)
        for route in files.routes:
            out.print(f"gateway: {route.line()}", markup=False)
        metrics = f"http://{args.metrics_listen}/metrics"
        out.print(
            f"gateway: http://{args.listen}/v1, metrics {metrics}, {metrics}/classes (config {config})", markup=False
        )
        for sig in (signal.SIGTERM, signal.SIGINT):  # HAProxy stops on either; pass on what we receive
            signal.signal(sig, lambda received, _: proc.send_signal(received))
        code = proc.wait()
    if code not in (0, 143, -signal.SIGTERM, -signal.SIGINT):
        err.print(f"error: haproxy exited with code {code}", markup=False)
        return 4
    return 0


def _engines(entry: SiteEntry) -> list[Backend]:
    """The engines an appliance runs, as it reports them: each slot of one serving slots, else its one engine."""
    from appliance.control.client import SyncControlClient
    from appliance.control.site_file import target
    from appliance.deploy.gateway import backend

    with SyncControlClient(target(entry)) as api:
        slots = api.slots()
        states = {f"{entry.name}.{s}": (d, f"/slots/{s}/readyz") for s, d in slots.slots.items()} if slots else {}
        if not states:
            states = {entry.name: (api.state(), "/readyz")}
    return [
        backend(
            name,
            state.engine_url,
            entry.url,
            entry.ca_file,
            model=state.served_name,
            max_concurrency=state.max_concurrency or 1,  # an appliance too old to say: one at a time
            check_path=check,
        )
        for name, (state, check) in states.items()
    ]


def register(command: Command) -> None:
    """gateway."""
    from appliance.deploy.gateway import METRICS_LISTEN

    gateway = command("gateway", _cmd_gateway)
    gateway.add_argument("overrides", nargs="*", help="config overrides, e.g. gateway.ttft_slo_s=1")
    gateway.add_argument("--site-dir", type=Path, default=None, help="directory of fleet site files")
    gateway.add_argument("--site-file", type=Path, required=True, help="YAML list of {name, url, token_env}")
    gateway.add_argument("--listen", default="127.0.0.1:8080", help="host:port of the one OpenAI endpoint")
    # A flag, as --listen is: where this gateway process binds on its host, not a limit the site's config declares.
    gateway.add_argument(
        "--metrics-listen",
        default=METRICS_LISTEN,
        help="host:port of HAProxy's Prometheus exporter (GET /metrics; `render prometheus --gateway` scrapes it)",
    )
    gateway.add_argument("--check-interval-ms", type=int, default=500, help="readiness probe interval")
    gateway.add_argument("--out", type=Path, help="directory for haproxy.cfg and its files (default: a temporary one)")
    gateway.add_argument("--dry-run", action="store_true", help="print haproxy.cfg, with each model's limits, and exit")
