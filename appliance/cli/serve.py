"""serve, status and drain: boot and supervise the engine; ask a running appliance how it is; drain it."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic_core import to_jsonable_python

from appliance.cli import check, slots
from appliance.cli.common import Command, err, out
from appliance.cli.engine_verdict import engine_accepts, print_verdict, refused, validated_for
from appliance.compat.matrix import load_matrix
from appliance.errors import ApiError, ConfigError, EngineError, LaunchError, Problem
from appliance.host.discovery import discover_host
from appliance.plan import LaunchPlan, build_plan

if TYPE_CHECKING:
    from appliance.control.client import Target
    from appliance.control.documents import BootDocument, StateDocument, TensorCacheDocument
    from appliance.observe.metrics_window import LoadSummary
    from appliance.preflight.engine_gate import GatedEngine
    from appliance.rollout.generation import Journal
    from appliance.rollout.runner import Planned, Planner
    from appliance.runtime.media_gate import MediaGate

__all__ = ["control_token", "register"]


def _cmd_serve(args: argparse.Namespace) -> int:
    import asyncio

    from appliance.preflight.engine_gate import GatedEngine, verdict_in_engine
    from appliance.preflight.launch import secrets_from_dir
    from appliance.runtime.media_gate import open_media_gate
    from appliance.runtime.spawn import spawn_engine
    from appliance.serve import (
        Generations,
        bind_control_socket,
        control_token,
        ensure_model,
        host_locks,
        preflight,
        run_service,
    )

    # A Secret mounted as files becomes the variables the config names, before anything reads them.
    os.environ.update(secrets_from_dir(os.environ))
    if slots.wanted(args):
        return slots.serve_slots(args)
    host = discover_host()
    gates = None
    if args.gates is not None:
        from appliance.rollout.gates import load_gate_file

        gates = load_gate_file(args.gates)
    planned = _planned(args, tuple(args.overrides), None)
    preflight(planned.plan, host)  # before the journal is read: its directory is judged too
    journal = _resumed_journal(args, planned.plan)
    if journal.current.overrides != tuple(args.overrides):
        # an upgrade passed: serve its generation
        planned = _planned(args, journal.current.overrides, journal.current.against)
        preflight(planned.plan, host)
    validated, plan = planned.validated, planned.plan
    _weights_ready(plan, journal.current.overrides, args.fetch)
    _announce(plan, validated.family.description)
    checks = check.host_checks_for_serve(validated, plan, host)
    with host_locks(plan, host):
        control = bind_control_socket(plan)
        generations = Generations(journal, _judge(args), gates, planned.workload)
        owned = tuple(b.index for b in host.boards) if plan.engine == "tt" else ()

        async def service() -> int:
            media = await open_media_gate(plan)  # before any spawn: a vision engine fetches through it
            # The CPU engine imports vLLM while the checkpoint is checked or built (engine_gate.py).
            gate = await GatedEngine.start(plan, os.environ) if args.probe and verdict_in_engine(plan) else None
            try:
                await asyncio.to_thread(ensure_model, plan, err.console)
                if gate is not None:
                    await _judged(plan, gate, media)
                elif args.probe:
                    engine_accepts(plan)
                token = control_token(plan)
                where = f"token file {token.file} (0600)" if token.file else f"token from ${plan.control.token_env}"
                out.print(f"control API: http://{plan.control.host}:{plan.control.port} ({where})", markup=False)
                out.print(f"OpenAI API:  {plan.base_url}/v1 (model {plan.served_name!r})", markup=False)
                spawn = spawn_engine if gate is None else gate.spawn
                return await run_service(plan, token.value, control, checks, generations, owned, spawn, media)
            finally:
                if gate is not None:
                    await gate.close()
                if media is not None:
                    await media.close()

        return asyncio.run(service())


async def _judged(plan: LaunchPlan, gate: GatedEngine, media: MediaGate | None) -> None:
    """The waiting engine's verdict (preflight/engine_gate.py), printed as `plan --probe` prints it; a refusal is
    exit 2 with nothing listening, and so is a vision engine whose fetches would not go through its media gate."""
    err.print(
        f"asking the engine's config code ({plan.python}) about this plan, in the engine's process ...", markup=False
    )
    verdict = await gate.judge()
    print_verdict(verdict)
    if not verdict.accepted:
        raise refused(verdict)
    if media is not None and verdict.effective.get("media_proxy") != media.url:
        raise LaunchError(
            f"the engine would fetch images through {verdict.effective.get('media_proxy') or 'no proxy'}"
            f", not the appliance's media gate {media.url}: nothing was started"
        )


def _planned(args: argparse.Namespace, overrides: tuple[str, ...], against: str | None) -> Planned:
    """A generation's full override list and plugin state -> its validated plan, the way `serve` judges its command
    line (a plugin state that is not recorded is refused on any engine)."""
    from appliance.compat.state_set import load_states
    from appliance.rollout.runner import Planned

    load_states().select(against)
    asked = argparse.Namespace(**{**vars(args), "overrides": list(overrides), "against": against})
    validated = validated_for(asked, load_matrix(), args.probe)
    return Planned(validated, build_plan(validated))


def _weights_ready(plan: LaunchPlan, overrides: tuple[str, ...], fetch: bool) -> None:
    """A pinned checkpoint in the store and matching its lock, before anything is spawned (exit 3 naming the file
    and the command that mends it); with `serve --fetch`, fetched first."""
    from appliance.cli.weights import check_weights, fetch_weights

    if fetch and plan.weights is not None:
        fetch_weights(plan, list(overrides))
    check_weights(plan, list(overrides))


def _judge(args: argparse.Namespace) -> Planner:
    """How the serving appliance judges an upgrade's generation before anything changes: validated, its model
    built, and (unless `serve --no-probe`) the engine's own config code asked in the new environment."""
    from appliance.serve import ensure_model

    def judge(overrides: tuple[str, ...], against: str | None) -> Planned:
        planned = _planned(args, overrides, against)
        _weights_ready(planned.plan, overrides, fetch=False)  # the roll fetched it ahead on every host
        ensure_model(planned.plan, err.console)
        if args.probe:
            engine_accepts(planned.plan)
        return planned

    return judge


def _resumed_journal(args: argparse.Namespace, plan: LaunchPlan) -> Journal:
    """The generations journal of this appliance (its control port's), with an upgrade cut off by a stop marked."""
    import time

    from appliance.control.upgrade_documents import GenerationDocument
    from appliance.rollout.generation import journal_path, read_journal, resume

    site_dir = str(args.site_dir) if args.site_dir else None
    first = GenerationDocument(plan.config_hash, tuple(args.overrides), plan.python, time.time())
    journal = resume(
        read_journal(journal_path(plan.state_dir, plan.control.port)), tuple(args.overrides), site_dir, first
    )
    last = journal.last
    if last is not None and last.outcome != "passed":
        err.print(f"last upgrade {last.old.id} -> {last.new.id} {last.outcome}: {last.reason}", markup=False)
    if journal.current.id != first.id:
        err.print(
            f"serving generation {journal.current.id}, upgraded from {first.id} (`appliance status`)", markup=False
        )
    return journal


def _announce(plan: LaunchPlan, description: str) -> None:
    for warning in plan.warnings:
        err.print(warning.render(), markup=False)
    if plan.generate:
        out.print(
            f"serving the embedded {plan.checkpoint} on the CPU engine: {description}. "
            "Use +model=<family> mesh=<mesh> on a TT host.",
            markup=False,
        )


def control_token(args: argparse.Namespace) -> str:
    """The control token: from `--token-file` when given (`/dev/stdin` reads it from a pipe, out of the process
    list), else from the variable `--token-env` names."""
    if not args.token_file:
        return os.environ.get(args.token_env, "")
    try:
        return Path(args.token_file).read_text().strip()
    except OSError as error:
        problem = Problem(
            code="token-file",
            key="--token-file",
            message=f"cannot read {args.token_file}: {error.strerror}",
            fix="Pass the token file `serve` printed, or set the token env var",
        )
        raise ConfigError((problem,)) from None


def _cmd_status(args: argparse.Namespace) -> int:
    from appliance.control.client import SyncControlClient, Target, slot_target
    from appliance.control.documents import dump

    appliance = Target(args.url, args.url.rstrip("/"), control_token(args), args.ca_file)
    with SyncControlClient(appliance) as api:
        slots = api.slots()
    targets = [slot_target(appliance, name) for name in slots.slots] if slots else [appliance]
    rows = [_status_of(target) for target in targets]
    if args.json:
        docs = [dump(state) | {"load": to_jsonable_python(load)} for state, load in rows]
        out.print_json(data={"slots": dict(zip(slots.slots, docs, strict=True))} if slots else docs[0])
        return 0
    for name, (state, load) in zip(slots.slots if slots else [""], rows, strict=True):
        uptime = f"{state.uptime_s:.0f}s" if state.uptime_s is not None else "-"
        out.print(
            f"{f'{name}  ' if name else ''}{state.state}  {state.checkpoint} on {state.mesh} ({state.engine})  "
            f"site {state.site}  pid {state.pid}  up {uptime}  restarts {state.restarts}  config {state.config_hash}",
            markup=False,
        )
        indent = "  " if name else ""  # a slot's details sit under its own line
        for line in _detail_lines(state, load):
            out.print(indent + line, markup=False)
    return 0


def _cmd_drain(args: argparse.Namespace) -> int:
    """POST /drain; with --wait, until the engine has stopped (what a Kubernetes preStop hook runs)."""
    import time

    from appliance.control.client import SyncControlClient, Target

    with SyncControlClient(Target(args.url, args.url.rstrip("/"), control_token(args), args.ca_file)) as api:
        out.print(f"drain accepted in state {api.act('drain')}", markup=False)
        deadline = time.monotonic() + args.wait
        while (now := api.state()).state not in ("stopped", "failed") and time.monotonic() < deadline:
            time.sleep(0.5)
    if args.wait and now.state not in ("stopped", "failed"):
        raise EngineError(f"{args.url}: still {now.state} after {args.wait:.0f}s")
    cancelled = _cancelled(now) if now.state == "stopped" else ""  # else it is an earlier drain's
    out.print(f"engine {now.state}" + (f"; {cancelled}" if cancelled else ""), markup=False)
    return 0


def _detail_lines(state: StateDocument, load: LoadSummary | None) -> list[str]:
    """What status says of one engine under its line: boot, generation, faults, capabilities, load."""
    from appliance.control.upgrade_documents import generation_lines

    lines = [_boot_line(state.boot)] if state.boot is not None else []
    lines += generation_lines(state.generation, state.previous_generation, state.upgrade)
    if state.weights is not None:
        lines.append(
            f"weights: {state.weights.checkpoint}@{state.weights.revision} from {state.weights.entry}, "
            f"checked against {state.weights.lock_file} before boot"
        )
    if state.tensor_cache is not None:
        lines.append(_cache_line(state.tensor_cache))
    if state.boards is not None:
        lines.append(state.boards.heading())
        lines += [
            f"  {b.name} {b.state}: {b.readings()}; {b.trends()}" + (f"; {b.reason}" if b.reason else "")
            for b in state.boards.boards
        ]
    if state.quarantined:
        lines.append("quarantined: the device fault came back after a board reset; the host needs hands")
    if state.last_error:
        lines.append(f"last error: {state.last_error}")
    if cancelled := _cancelled(state):
        lines.append(f"last drain: {cancelled}")
    lines += state.capabilities.verdict() if state.capabilities else ()
    if state.host_share:
        lines.append(f"host share: {state.host_share}")
    if load is not None:
        lines.append(_load_line(load, state.max_concurrency))
    return lines


def _cancelled(state: StateDocument) -> str:
    if not state.drain_cancelled:
        return ""
    return f"the drain deadline cancelled {state.drain_cancelled} requests still in flight"


def _cache_line(cache: TensorCacheDocument) -> str:
    import time

    if not cache.built:
        return f"tensor cache: not built yet ({cache.path}): the first boot to ready builds it"
    ago = time.time() - (cache.built_at or 0.0)
    return f"tensor cache: built {ago / 3600:.1f} h ago by a boot of {cache.boot_s or 0:.0f}s ({cache.path})"


def _boot_line(boot: BootDocument) -> str:
    if boot.tensor_cache_built is False:
        return f"booting: {boot.phase}, {boot.elapsed_s:.0f}s, building the tensor cache (no ETA: a cold cache)"
    if boot.expected_s is None:
        return f"booting: {boot.phase}, {boot.elapsed_s:.0f}s (first boot of this config here: no ETA yet)"
    eta = "overdue" if boot.eta_s == 0 else f"ETA {boot.eta_s:.0f}s"
    slow = "  SLOW: far beyond this config's record" if boot.slow else ""
    return f"booting: {boot.phase}, {boot.elapsed_s:.0f}s of ~{boot.expected_s:.0f}s ({eta}){slow}"


def _status_of(target: Target) -> tuple[StateDocument, LoadSummary | None]:
    from appliance.control.client import SyncControlClient

    with SyncControlClient(target) as api:
        state = api.state()
        try:
            return state, _load_once(api.engine_metrics())
        except ApiError:
            return state, None  # the state is what status promises; load is shown when it can be read


def _load_once(page: str) -> LoadSummary:
    """Lifetime load from one scrape of the engine's metrics, as status reports it (GET /load has the window)."""
    from appliance.observe.engine_metrics import parse_metrics
    from appliance.observe.metrics_window import FAMILIES, summarize

    return summarize([parse_metrics(page, 0.0, keep=FAMILIES)])


def _load_line(load: LoadSummary, limit: int | None) -> str:
    def pct(value: Any) -> str:
        return "n/a" if value is None else f"{value.p50 * 1000:.1f}/{value.p99 * 1000:.1f} ms"

    def count(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.0f}"

    kv = "n/a" if load.kv_usage is None else f"{load.kv_usage:.1%}"
    return (
        f"running {count(load.running)}/{limit}  waiting {count(load.waiting)}  KV {kv}  since start: TTFT p50/p99 "
        f"{pct(load.ttft)}  ITL {pct(load.itl)}  e2e {pct(load.e2e)}"
    )


def register(command: Command) -> None:
    """serve and status."""
    serve = command("serve", _cmd_serve)
    serve.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. +model=llama mesh=t3k")
    serve.add_argument("--site-dir", type=Path, default=None, help="directory of fleet site files")
    serve.add_argument(
        "--fetch",
        action="store_true",
        help="fetch a pinned checkpoint the store lacks before boot "
        "(hundreds of GB: otherwise a deliberate `appliance fetch`, scheduled ahead)",
    )
    serve.add_argument(
        "--no-probe", dest="probe", action="store_false", help="boot without asking the engine's config code first"
    )
    serve.add_argument(
        "--gates",
        type=Path,
        help="hold this boot out of rotation until it passes these gates "
        "against their recorded baseline (a Kubernetes rollout's gate; docs: Generations and "
        "upgrades)",
    )
    status = command("status", _cmd_status)
    drain = command("drain", _cmd_drain)
    for cmd in (status, drain):
        cmd.add_argument("--url", default="http://127.0.0.1:8100", help="the appliance's control API")
        cmd.add_argument("--token-env", default="APPLIANCE_TOKEN", help="env var holding the control API token")
        cmd.add_argument("--token-file", help="token file that `serve` printed")
        cmd.add_argument("--ca-file", help="CA bundle that verifies an https control API (control.tls)")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    drain.add_argument("--wait", type=float, default=0.0, help="seconds to wait for the engine to stop (default: none)")
