"""upgrade: move a running appliance to a new generation in place, behind gates, rolled back if one fails.

The client builds the new engine environment beside the old one where new pins are given, and sends the new
generation's overrides (the serving generation's with the change applied). The appliance judges them before
anything changes, with its own files and environment as its `serve` would (validated, its model built, the
engine's own config code asked in the new environment), then runs the upgrade itself (POST /upgrade); this
command follows its steps in /state until it ends.

With `--fetch` it changes nothing in the appliance: it composes the new generation as the appliance would (its
serving overrides with the change, its site directory and paths, read from its control API) and fetches that
generation's pinned checkpoint into this host's model store, verified against its weights lock, so the upgrade's
judge finds it there and the time out of rotation never includes a download (a site's roll runs it on every host
first).

Exit codes: 0 passed (or nothing to change, or fetched), 1 a gate failed and the old generation serves again, 2 the
new config is refused, 3 the appliance cannot be upgraded now (unreachable, an upgrade under way, a fetch that
failed), 4 the upgrade was interrupted or its rollback failed.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic_core import to_jsonable_python

from appliance.cli.common import Command, out, validated_config
from appliance.cli.serve import control_token
from appliance.compat.matrix import load_matrix
from appliance.errors import ApiError, ConfigError, EngineError, LaunchError, Problem

if TYPE_CHECKING:
    from appliance.control.client import SyncControlClient
    from appliance.control.documents import StateDocument
    from appliance.control.upgrade_documents import GenerationDocument, UpgradeDocument

__all__ = ["merged_overrides", "register"]

_EXIT = {"passed": 0, "rolled-back": 1, "interrupted": 4, "failed": 4}
_JUDGE_TIMEOUT_S = 900.0  # the appliance answers POST /upgrade after building the model and probing (tt: 300 s)
_GATE_FLAGS = (
    "ready_s",
    "eval_tolerance",
    "eval_set",
    "load_duration_s",
    "load_requests",
    "goodput_tolerance",
    "ttft_tolerance",
    "skip",
)
_PLACE = ("paths.cache_dir", "paths.state_dir")
"""Keys the appliance resolved from its own environment (HOME, APPLIANCE_CACHE_DIR), which this command's need not
share: the model store and the weights locks lie under them."""


def merged_overrides(base: tuple[str, ...], change: list[str]) -> tuple[str, ...]:
    """`base` with each key `change` sets replaced by its new value, new keys appended (Hydra takes one per key)."""
    keys = {_key(o) for o in change}
    return (*(o for o in base if _key(o) not in keys), *change)


def _key(override: str) -> str:
    return override.partition("=")[0].lstrip("+~")


def _cmd_upgrade(args: argparse.Namespace) -> int:
    from appliance.control.client import SyncControlClient, Target
    from appliance.rollout.gates import parse_settings

    given = {name: getattr(args, name) for name in _GATE_FLAGS if getattr(args, name) not in (None, [])}
    gates = to_jsonable_python(parse_settings(given, "--"))
    target = Target(args.url, args.url.rstrip("/"), control_token(args), args.ca_file)
    with SyncControlClient(target, timeout_s=_JUDGE_TIMEOUT_S) as api:
        state, generation = _serving(api)
        change = list(args.overrides)
        if args.fetch:
            return _fetch(
                args.url, state, merged_overrides(generation.overrides, change), args.against or generation.against
            )
        if args.build_dir is not None:
            python = _built(args.build_dir, api.state())
            change = [o for o in change if _key(o) != "engine.python"] + [f"engine.python={python}"]
        against = args.against or generation.against
        record = _judged(api, merged_overrides(generation.overrides, change), against, gates, args.check)
        if record.old.id == record.new.id or args.check:
            verb = "would upgrade" if record.old.id != record.new.id else "nothing to change, serving"
            out.print(
                f"{args.url}: {verb} generation {record.old.id}"
                + (f" -> {record.new.id}" if record.old.id != record.new.id else ""),
                markup=False,
            )
            return 0
        out.print(f"{args.url}: upgrading generation {record.old.id} -> {record.new.id}", markup=False)
        final = _follow(api, record.started, args.json)
    if args.json:
        out.print_json(data=to_jsonable_python(final))
    if final.outcome != "passed":
        out.print(f"{args.url}: upgrade {final.outcome}: {final.reason}", markup=False)
    else:
        out.print(f"{args.url}: upgrade passed, serving generation {final.new.id}", markup=False)
    return _EXIT[final.outcome]


def _serving(api: SyncControlClient) -> tuple[StateDocument, GenerationDocument]:
    """The appliance's state and the generation it serves; LaunchError (nothing changed) when it cannot be upgraded
    now."""
    try:
        state = api.state()
    except ApiError as error:
        raise LaunchError(f"cannot upgrade {error}; nothing was changed") from None
    if state.generation is None:
        raise LaunchError(f"{api.target.name}: keeps no generations (a slot, or an older appliance); nothing changed")
    if state.upgrade is not None and state.upgrade.outcome == "running":
        raise LaunchError(f"{api.target.name}: an upgrade is under way (step {state.upgrade.step}); wait for it")
    return state, state.generation


def _fetch(url: str, state: StateDocument, overrides: tuple[str, ...], against: str | None) -> int:
    """The new generation's pinned checkpoint fetched into this host's store and verified (exit 3 in one line when
    it cannot be), composed as the serving appliance composes it: with its site directory and its paths."""
    from appliance.cli.weights import fetch_weights
    from appliance.plan import build_plan

    place = tuple(f"{key}={state.config[key]}" for key in _PLACE if state.config.get(key))
    composed = list(merged_overrides(place, list(overrides)))  # the generation's own paths, where it sets them
    site_dir = Path(state.site_dir) if state.site_dir else None
    asked = argparse.Namespace(overrides=composed, site_dir=site_dir, against=against)
    plan = build_plan(validated_config(asked, load_matrix()))
    if plan.weights is None:
        out.print(
            f"{url}: nothing to fetch: the new generation pins no hub checkpoint ({plan.checkpoint})", markup=False
        )
        return 0
    fetch_weights(plan, [*composed, *(["--site-dir", str(site_dir)] if site_dir else [])])
    return 0


def _built(build_dir: Path, state: StateDocument) -> str:
    from appliance.resources import default_engines_dir
    from appliance.rollout.environments import build_environment

    config = state.config
    engines = config.get("paths.engines_dir")
    where = Path(engines) if engines else default_engines_dir(str(config.get("paths.cache_dir")))
    return str(build_environment(where, state.engine, build_dir))


def _judged(
    api: SyncControlClient, overrides: tuple[str, ...], against: str | None, gates: object, check: bool
) -> UpgradeDocument:
    """The appliance's verdict on the new generation: its record, or its refusal (exit 2; 3 while one runs)."""
    try:
        return api.upgrade(overrides, against, gates if isinstance(gates, dict) else {}, check=check)
    except ApiError as error:
        if error.status == 400:
            raise ConfigError((Problem(code="upgrade-refused", key=api.target.name, message=error.reason),)) from None
        raise LaunchError(f"{error}; nothing was changed") from None


def _follow(api: SyncControlClient, started: float, quiet: bool) -> UpgradeDocument:
    """Each step as it ends and each gate as it is judged, until the upgrade ends."""
    steps = gates = 0
    while True:
        # The appliance died mid-upgrade, whichever moment: unreachable, back with another record, or back with this
        # one journaled as interrupted. It comes back on a whole generation; said one way, exit 4.
        try:
            upgrade = api.state().upgrade
        except ApiError as error:
            raise _lost(api, str(error)) from None
        if upgrade is None or upgrade.started != started:
            raise _lost(api, "it answers again without this upgrade's record")
        if upgrade.outcome == "interrupted":
            raise _lost(api, f"its upgrade was {upgrade.reason}")
        ended = [s for s in upgrade.steps if s.ended is not None]
        lines = [_step_line(s.name, s.started, s.ended, s.detail) for s in ended[steps:]]
        lines += [g.render() for g in upgrade.gates[gates:]]
        steps, gates = len(ended), len(upgrade.gates)
        for line in [] if quiet else lines:
            out.print(f"  {line}", markup=False)
        if upgrade.outcome != "running":
            return upgrade
        time.sleep(1.0)


def _lost(api: SyncControlClient, why: str) -> EngineError:
    return EngineError(
        f"{api.target.name}: lost the appliance mid-upgrade ({why}); `appliance status` says which generation it serves"
    )


def _step_line(name: str, started: float, ended: float | None, detail: str) -> str:
    took = f"{ended - started:.1f}s" if ended is not None else "..."
    return f"step {name} ({took}){': ' + detail if detail else ''}"


def register(command: Command) -> None:
    from appliance.rollout.gates import SKIPPABLE

    cmd = command("upgrade", _cmd_upgrade)
    cmd.add_argument("overrides", nargs="*", help="what changes, as Hydra overrides on the serving generation's")
    cmd.add_argument("--url", default="http://127.0.0.1:8100", help="the appliance's control API")
    cmd.add_argument("--token-env", default="APPLIANCE_TOKEN", help="env var holding the control API token")
    cmd.add_argument("--token-file", help="token file that `serve` printed")
    cmd.add_argument("--ca-file", help="CA bundle that verifies an https control API (control.tls)")
    cmd.add_argument(
        "--build-dir",
        type=Path,
        help="new engine pins: a build/ directory whose recipe is built "
        "beside the running environment, named by its pins' hash",
    )
    cmd.add_argument(
        "--against",
        metavar="vllm=X",
        help="a new plugin state: judge and serve the generation under "
        "the recorded state that targets vLLM X (default: the serving generation's)",
    )
    mode = cmd.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="judge the change only; change nothing")
    mode.add_argument(
        "--fetch",
        action="store_true",
        help="fetch and verify the new generation's pinned weights into"
        " this host's model store, changing nothing in the appliance (a roll's first play)",
    )
    cmd.add_argument("--json", action="store_true", help="the final upgrade record as JSON")
    gates = cmd.add_argument_group("gates (each has a default and a range; see the docs, Generations and upgrades)")
    gates.add_argument("--ready-s", type=float, help="boot budget (default: the new plan's ready_timeout_s)")
    gates.add_argument("--eval-tolerance", type=float, help="accuracy points the eval may lose (0-1, default 0.1)")
    gates.add_argument("--eval-set", help="evaluation set file (default build/eval/basic.yaml)")
    gates.add_argument("--load-duration-s", type=float, help="the workload run's send window (default 15)")
    gates.add_argument("--load-requests", type=int, help="the workload run's request cap (default 40)")
    gates.add_argument("--goodput-tolerance", type=float, help="relative goodput drop allowed (0-1, default 0.25)")
    gates.add_argument("--ttft-tolerance", type=float, help="relative TTFT p95 rise allowed (default 0.5)")
    gates.add_argument("--skip", action="append", choices=SKIPPABLE, default=[], help="a gate not to run")
