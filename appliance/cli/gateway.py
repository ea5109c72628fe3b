"""gateway: one OpenAI endpoint for a site's appliances, HAProxy gated by each one's readiness."""

from __future__ import annotations

import argparse
import signal
import tempfile
from pathlib import Path

from appliance.cli.common import Command, err, out

__all__ = ["register"]


def _cmd_gateway(args: argparse.Namespace) -> int:
    from appliance.control.client import SyncControlClient
    from appliance.control.site_file import load_site_file, target
    from appliance.deploy.gateway import backend, render_haproxy, run_haproxy

    backends = []
    for entry in load_site_file(args.site_file):
        with SyncControlClient(target(entry)) as api:  # each appliance says where its engine serves
            backends.append(backend(entry.name, api.state().engine_url, entry.url, entry.ca_file))
    text = render_haproxy(backends, args.listen, args.check_interval_ms)
    if args.dry_run:
        out.print(text, markup=False, end="")
        return 0
    folder = args.out or Path(tempfile.mkdtemp(prefix="appliance-gateway-"))
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "haproxy.cfg"
    config.write_text(text)
    proc = run_haproxy(config)
    names = ", ".join(b.name for b in backends)
    out.print(f"gateway: http://{args.listen}/v1 -> {names} (config {config})", markup=False)
    for sig in (signal.SIGTERM, signal.SIGINT):  # HAProxy stops on either; pass on what we receive
        signal.signal(sig, lambda received, _: proc.send_signal(received))
    code = proc.wait()
    if code not in (0, 143, -signal.SIGTERM, -signal.SIGINT):
        err.print(f"error: haproxy exited with code {code}", markup=False)
        return 4
    return 0


def register(command: Command) -> None:
    """gateway."""
    gateway = command("gateway", _cmd_gateway)
    gateway.add_argument("--site-file", type=Path, required=True, help="YAML list of {name, url, token_env}")
    gateway.add_argument("--listen", default="127.0.0.1:8080", help="host:port of the one OpenAI endpoint")
    gateway.add_argument("--check-interval-ms", type=int, default=500, help="readiness probe interval")
    gateway.add_argument("--out", type=Path, help="directory for haproxy.cfg (default: a temporary one)")
    gateway.add_argument("--dry-run", action="store_true", help="print haproxy.cfg and exit")
