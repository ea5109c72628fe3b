"""`appliance render gateway-systemd|gateway-k8s`: the site's gateway, deployed as the appliances are."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from appliance.cli.common import out
from appliance.errors import ConfigError, Problem

__all__ = ["render_gateway"]


def render_gateway(args: argparse.Namespace) -> int:
    """The gateway's unit or manifests, from the site file and the positional overrides (the `gateway` section)."""
    from appliance.config.compose import compose_config
    from appliance.control.site_file import load_site_file
    from appliance.deploy.gateway_systemd import unprivileged_port
    from appliance.deploy.k8s import dns_name

    if args.site_file is None:
        fix = "Pass --site-file"
        message = f"render {args.kind} fronts the appliances a site file lists: none given"
        raise ConfigError((Problem(code="missing-flag", key="--site-file", message=message, fix=fix),))
    entries = load_site_file(args.site_file)  # judged here: a unit or pod never starts on a site file it refuses
    config = compose_config(args.overrides, site_dir=args.site_dir).config
    name = args.name or dns_name(f"tt-appliance-gateway-{args.site_file.stem}")
    if args.kind == "gateway-k8s":
        from appliance.deploy.gateway_k8s import render_gateway_k8s

        manifests = render_gateway_k8s(
            args.site_file.read_text(),
            entries,
            config.gateway,
            namespace=config.site.namespace,
            name=name,
            image=args.image,
            port=unprivileged_port(args.listen),  # the pod binds its own address: only the port is kept
            replicas=args.replicas,
        )
        if args.out is None:
            out.print(manifests.yaml(), markup=False, end="")
        for path in manifests.write(args.out) if args.out else ():
            out.print(f"wrote {path}", markup=False)
        return 0
    from appliance.deploy.gateway_systemd import render_gateway_systemd

    unit = render_gateway_systemd(
        args.site_file,
        entries,
        config.gateway,
        args.overrides,
        listen=args.listen,
        appliance=str(Path(sys.executable).with_name("appliance")),
        name=name,
        site_dir=args.site_dir,
    )
    if args.out is None:
        out.print(unit.text, markup=False, end="")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / unit.name).write_text(unit.text)
    out.print(f"wrote {args.out / unit.name}; put the control tokens in {unit.env_file} (mode 0600)", markup=False)
    return 0
