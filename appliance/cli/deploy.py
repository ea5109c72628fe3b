"""`appliance` subcommands for engine environments and fleet deployment: build, manifest, render, sites."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from pydantic_core import to_jsonable_python

from appliance import __version__
from appliance.cli import slots
from appliance.cli.common import Command, err, findings, out, validated_config
from appliance.compat.matrix import load_matrix
from appliance.errors import ConfigError, Problem
from appliance.host.discovery import discover_host
from appliance.plan import build_plan

__all__ = ["plan_all_sites", "register"]


def plan_all_sites(args: argparse.Namespace) -> int:
    from appliance.deploy.sites import plan_sites

    sites = plan_sites(args.overrides, load_matrix(), discover_host, args.site_dir)
    if args.json:
        out.print_json(
            data=[
                {"site": s.name, "ok": s.ok, "plan": s.plan.to_json() if s.plan else None, **findings(s.problems)}
                for s in sites
            ]
        )
    for site in [] if args.json else sites:
        plan = site.plan
        head = f"{plan.checkpoint} on {plan.mesh} ({plan.engine}), config {plan.config_hash}" if plan else "invalid"
        out.print(f"site {site.name}: {head}", markup=False)
        for line in [plan.command_line()] if plan else []:
            out.print(f"  {line}", markup=False)
        for problem in site.problems:
            out.print(f"  {problem.render()}", markup=False)
    return 0 if all(s.ok for s in sites) else 2


def _cmd_sites(args: argparse.Namespace) -> int:
    from appliance.deploy.sites import list_sites

    sites = list_sites(args.site_dir)
    if args.json:
        out.print_json(data=to_jsonable_python(sites, fallback=dict))
        return 0
    for site in sites:
        groups = " ".join(f"{g}={v}" for g, v in site.groups.items())
        out.print(f"{site.name} ({site.file}) {groups}".rstrip(), markup=False)
        for key, value in site.overrides.items():
            out.print(f"  {key}={value}", markup=False)
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    from appliance.config.compose import compose_config
    from appliance.engines.build import build_recipe, run_build

    if args.check_upgrade:
        return _check_upgrade(args)
    recipe = build_recipe(compose_config(args.overrides, site_dir=args.site_dir))
    if args.dry_run:
        out.print(recipe.script(), markup=False, end="")
        return 0
    result = run_build(recipe, discover_host(), err.console)
    out.print(f"built engine={recipe.engine} in {result.seconds:.1f}s; manifest {recipe.manifest_path}", markup=False)
    return _print_manifest(result.manifest, as_json=False)


def _check_upgrade(args: argparse.Namespace) -> int:
    """What moving the pin takes, then every site whose verdict the move changes (with its findings)."""
    from appliance.compat.state_set import load_states
    from appliance.engines.site_verdicts import site_changes
    from appliance.engines.upgrade import check_upgrade

    report = check_upgrade(args.check_upgrade)
    out.print(f"vllm {report.current} -> {report.target}: {report.verdict}", markup=False)
    for finding in report.findings:
        out.print(f"  {finding.render()}", markup=False)
    states = load_states()
    target = states.for_vllm(report.target)
    if report.target == report.current or target is None:
        if report.target != report.current:
            out.print(f"sites: no recorded plugin contract for vLLM {report.target}; verdicts not judged", markup=False)
        return 2 if report.blocked else 0
    changes = [
        c
        for c in site_changes(states, report.target, load_matrix(), discover_host, args.overrides, args.site_dir)
        if c.changed
    ]
    out.print(
        f"sites whose verdict changes under vllm-tt-plugin {target.label}: {len(changes) or 'none'}", markup=False
    )
    for change in changes:
        out.print(f"  site {change.site}: {change.before} -> {change.after}", markup=False)
        for problem in change.appeared:
            out.print(f"    + {problem.render()}", markup=False)
        for problem in change.gone:
            out.print(f"    - {problem.render()}", markup=False)
    return 2 if report.blocked else 0


def _cmd_manifest(args: argparse.Namespace) -> int:
    from appliance.engines.manifest import read_manifest

    plan = build_plan(validated_config(args, load_matrix()))
    manifest = read_manifest(plan.engine, plan.python, plan.config_hash, discover_host(), os.environ | plan.env)
    return _print_manifest(manifest, args.json)


def _print_manifest(manifest: Any, as_json: bool) -> int:
    """Exit 3 when the environment drifts from its pins: it cannot launch the pinned engine."""
    if as_json:
        out.print_json(data=manifest.to_json())
        return 0 if manifest.ok else 3
    out.print(
        f"engine {manifest.engine}: {manifest.interpreter} (Python {manifest.python}), "
        f"{len(manifest.distributions)} distributions, config {manifest.config_hash}",
        markup=False,
    )
    for row in manifest.pins:
        out.print(f"  {row.name}: pinned {row.pinned}, installed {row.installed or 'nothing'}", markup=False)
    out.print("pins hold" if manifest.ok else f"drift ({len(manifest.drift)}):", markup=False)
    for line in manifest.drift:
        out.print(f"  {line}", markup=False)
    out.print(
        f"host: {len(manifest.host.boards)} Tenstorrent board(s), kmd {manifest.host.kmd_version or 'none'}",
        markup=False,
    )
    return 0 if manifest.ok else 3


def _render_ansible(args: argparse.Namespace) -> int:
    """The site's upgrade playbook; the positional overrides are the change (`upgrade_args`)."""
    from appliance.control.site_file import load_site_file
    from appliance.deploy.ansible import render_ansible

    if args.site_file is None:
        raise _missing("--site-file", "render ansible upgrades the appliances a site file lists")
    appliance = [str(Path(sys.executable).with_name("appliance"))]
    files = render_ansible(args.site_file.stem, load_site_file(args.site_file), appliance, args.overrides)
    return _emit(args.out, {"inventory.yml": files.inventory, "upgrade.yml": files.playbook})


def _render_watch(args: argparse.Namespace) -> int:
    """render prometheus / grafana: a site's scrape config and alert rules, or its dashboard."""
    from appliance.control.site_file import load_site_file

    if args.site_file is None:
        raise _missing("--site-file", f"render {args.kind} watches the appliances a site file lists")
    site, entries = args.job or args.site_file.stem, load_site_file(args.site_file)
    if args.kind == "grafana":
        from appliance.deploy.grafana import render_grafana

        exporters = any(e.tt_telemetry for e in entries)
        dashboard = render_grafana(site, exporters, gateway=bool(args.gateway))
        return _emit(args.out, {f"tt-appliance-{site}.json": dashboard})
    from appliance.deploy.prometheus import RULES_FILE, AlertOptions, render_prometheus

    if args.credentials_dir is None:
        raise _missing(
            "--credentials-dir",
            "Prometheus reads each appliance's token from a file named after its token_env there (mode 0600)",
        )
    options = AlertOptions(**{f.name: getattr(args, f.name) for f in fields(AlertOptions)})
    gateways = tuple(args.gateway or ())
    files = render_prometheus(
        site, entries, args.credentials_dir, options, str(args.site_file), args.docs_url, gateways
    )
    return _emit(args.out, {"prometheus.yml": files.config, RULES_FILE: files.rules})


def _missing(flag: str, why: str) -> ConfigError:
    return ConfigError((Problem(code="missing-flag", key=flag, message=f"{why}: none given", fix=f"Pass {flag}"),))


def _emit(directory: Path | None, files: dict[str, str]) -> int:
    """Print the files one after the other, or write them into `directory`."""
    for name, text in files.items():
        if directory is None:
            out.print(f"# {name}\n{text}" if len(files) > 1 else text, markup=False, end="")
            continue
        directory.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)
        out.print(f"wrote {directory / name}", markup=False)
    return 0


def _cmd_render(args: argparse.Namespace) -> int:
    if args.kind.startswith("gateway-"):
        from appliance.cli.gateway_render import render_gateway

        return render_gateway(args)
    if args.kind == "ansible":
        return _render_ansible(args)
    if args.kind in ("prometheus", "grafana"):
        return _render_watch(args)
    if args.kind == "systemd":
        from appliance.deploy.systemd import with_unit_paths

        args = argparse.Namespace(**{**vars(args), "overrides": with_unit_paths(args.overrides)})
    if slots.wanted(args):
        return slots.render_slots(args)
    if args.kind == "k8s":
        from appliance.deploy.k8s import POD_OVERRIDES, render_k8s

        pod = argparse.Namespace(**{**vars(args), "overrides": [*POD_OVERRIDES, *args.overrides]})
        gates = None
        if args.gates is not None:
            from appliance.rollout.gates import load_gate_file

            load_gate_file(args.gates)  # judged here, so a pod never starts on a gate file it would refuse
            gates = args.gates.read_text()
        manifests = render_k8s(
            validated_config(pod, load_matrix()), image=args.image, name=args.name, replicas=args.replicas, gates=gates
        )
        if args.out is None:
            out.print(manifests.yaml(), markup=False, end="")
        for path in manifests.write(args.out) if args.out else ():
            out.print(f"wrote {path}", markup=False)
        return 0
    from appliance.deploy.systemd import render_systemd

    appliance = str(Path(sys.executable).with_name("appliance"))
    unit = render_systemd(
        build_plan(validated_config(args, load_matrix())), args.overrides, appliance=appliance, site_dir=args.site_dir
    )
    if args.out is None:
        out.print(unit.text, markup=False, end="")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / unit.name).write_text(unit.text)
    out.print(f"wrote {args.out / unit.name}; put the secrets in {unit.env_file} (mode 0600)", markup=False)
    return 0


def _watch_arguments(render: argparse.ArgumentParser) -> None:
    from appliance.deploy.prometheus import DOCS_URL, AlertOptions

    render.add_argument(
        "--site-file", type=Path, help="ansible, prometheus, grafana, gateway-*: the site's appliances (YAML)"
    )
    render.add_argument("--job", help="prometheus, grafana: the site's job name (default: the site file's name)")
    render.add_argument("--credentials-dir", type=Path, help="prometheus: a file per token_env holding its token")
    render.add_argument(
        "--gateway",
        action="append",
        metavar="HOST:PORT",
        help="prometheus, grafana: the site's gateway exporter (`appliance gateway --metrics-listen`); may repeat",
    )
    render.add_argument(
        "--docs-url",
        default=DOCS_URL,
        help="prometheus: where the site serves this documentation; "
        "each alert's runbook_url points into it (`make docs` builds it)",
    )
    for item in fields(AlertOptions):
        default = item.default
        render.add_argument(
            f"--{item.name.replace('_', '-')}",
            type=type(default),
            default=default,
            help=f"prometheus: {item.metadata['help']} (default {default})",
        )


def register(command: Command) -> None:
    """build, manifest, render and sites: engine environments and fleet deployment."""
    build = command("build", _cmd_build)
    build.add_argument("--dry-run", action="store_true", help="print every step without running it")
    build.add_argument("--check-upgrade", metavar="vllm=X", help="what moving the tt engine's vLLM pin would break")
    manifest = command("manifest", _cmd_manifest)
    manifest.add_argument("--json", action="store_true", help="machine-readable output")
    render = command("render", _cmd_render)
    kinds = ("k8s", "systemd", "ansible", "prometheus", "grafana", "gateway-systemd", "gateway-k8s")
    render.add_argument("kind", choices=kinds, help="what to render (gateway-*: the site's `appliance gateway`)")
    render.add_argument("--out", type=Path, help="write files into this directory instead of printing")
    image = "k8s, gateway-k8s: the appliance's image, a tag or name@sha256:<digest>"
    render.add_argument("--image", default=f"tt-appliance:{__version__}", help=image)
    name = "k8s, gateway-*: resource or unit name (default tt-appliance-<site>, tt-appliance-gateway-<site>)"
    render.add_argument("--name", help=name)
    render.add_argument(
        "--replicas",
        type=int,
        default=1,
        choices=range(1, 65),
        metavar="N",
        help="k8s, gateway-k8s: appliances (gateways) in the Deployment (1-64), rolled one at a time",
    )
    render.add_argument(
        "--listen",
        default="0.0.0.0:8080",
        help="gateway-*: host:port of the site's OpenAI endpoint (gateway-k8s keeps the port; the pod binds its own)",
    )
    render.add_argument(
        "--gates",
        type=Path,
        help="k8s: a gate file; each new pod is ready only once it passed "
        "these gates (`serve --gates`; docs: Generations and upgrades)",
    )
    _watch_arguments(render)
    for cmd in (build, manifest, render):
        cmd.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. engine=cpu or site=lab-t3k")
        cmd.add_argument("--site-dir", type=Path, default=None, help="directory of fleet site files")
    sites = command("sites", _cmd_sites)
    sites.add_argument("--site-dir", type=Path, default=None, help="directory of fleet site files")
    sites.add_argument("--json", action="store_true", help="machine-readable output")
