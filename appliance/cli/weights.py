"""fetch and store: a config's pinned checkpoint brought into the host's model store ahead of serving, verified
against its weights lock; what the store holds, and pruning what no generation needs."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING

from appliance.cli.common import Command, err, out, validated_config
from appliance.compat.matrix import load_matrix
from appliance.errors import ConfigError, Problem

if TYPE_CHECKING:
    from appliance.plan import LaunchPlan, WeightsPlan
    from appliance.weights.lock import Lock

__all__ = ["check_weights", "fetch_weights", "generations_using", "mend", "register"]

_GB = 1e9


def register(command: Command) -> None:
    fetch = command("fetch", _cmd_fetch)
    fetch.add_argument("overrides", nargs="*", help="Hydra overrides naming the config whose checkpoint to fetch")
    fetch.add_argument("--site-dir", type=Path, default=None, help="directory of fleet site files (and their locks)")
    fetch.add_argument(
        "--verify",
        action="store_true",
        help="hash every stored file against its lock, fetching nothing (a boot does not)",
    )
    store = command("store", _cmd_store)
    store.add_argument("overrides", nargs="*", help="Hydra overrides naming the site and paths whose store to list")
    store.add_argument("--site-dir", type=Path, default=None, help="directory of fleet site files (and their locks)")
    store.add_argument(
        "--prune", action="store_true", help="remove every revision no current or rollback generation on this host uses"
    )


def _cmd_fetch(args: argparse.Namespace) -> int:
    from appliance.plan import build_plan

    plan = build_plan(validated_config(args, load_matrix()))
    weights = plan.weights
    if weights is None:
        out.print(f"nothing to fetch: {_unpinned(plan)}", markup=False)
        return 0
    if args.verify:
        started = time.monotonic()
        lock = _verified(weights, full=True, overrides=args.overrides)
        size = sum(f.size for f in lock.files)
        elapsed = time.monotonic() - started
        out.print(
            f"verified: {weights.checkpoint}@{weights.revision}, {len(lock.files)} files, {size / _GB:.2f} GB "
            f"hashed in {elapsed:.1f} s ({size / _GB / max(elapsed, 1e-9):.2f} GB/s)",
            markup=False,
        )
        return 0
    fetch_weights(plan, args.overrides)
    return 0


def fetch_weights(plan: LaunchPlan, overrides: list[str]) -> None:
    """Bring `plan`'s pinned checkpoint into the store, checked against its lock (recorded at the first fetch)."""
    from rich.filesize import decimal

    from appliance.preflight.checks import tensor_cache_need
    from appliance.preflight.weights_check import recorded_lock
    from appliance.weights.errors import WeightsError
    from appliance.weights.fetch import fetch
    from appliance.weights.lock import write_lock
    from appliance.weights.progress import FetchDisplay
    from appliance.weights.source import Token, open_source

    weights = plan.weights
    assert weights is not None
    lock = recorded_lock(weights)
    source = open_source(weights.source, token=Token(env=weights.token_env, file=_path(weights.token_file)))
    err.print(
        f"fetching {weights.checkpoint}@{weights.revision} from {weights.source} into {weights.store} "
        f"({'checked against ' + weights.lock_file if lock else 'no lock yet: it is recorded now'})",
        markup=False,
    )
    started = time.monotonic()
    try:
        done = fetch(
            source,
            weights.checkpoint,
            weights.revision,
            Path(weights.store),
            lock,
            jobs=weights.jobs,
            progress=FetchDisplay(err.console),
            disk_reserve_bytes=tensor_cache_need(plan),
        )
    except WeightsError as error:
        raise mend(error, overrides) from None
    if lock is None:
        write_lock(Path(weights.lock_file), done.lock)
        err.print(
            f"recorded the weights lock {weights.lock_file} (trust on first use: every later fetch and boot is "
            "checked against it; ship it with the site's files)",
            markup=False,
        )
    elapsed = time.monotonic() - started
    rate = decimal(int(done.downloaded_bytes / max(elapsed, 1e-9)))
    how = "already in the store" if done.joined else f"{decimal(done.downloaded_bytes)} in {elapsed:.1f} s ({rate}/s)"
    out.print(
        f"fetched: {weights.checkpoint}@{weights.revision} in {done.entry} ({how}), verified against its lock",
        markup=False,
    )


def check_weights(plan: LaunchPlan, overrides: list[str]) -> None:
    """What every boot checks, in no minutes: each file's presence and size against the lock, and the stamp of the
    last full verification (a file changed since is refused). A WeightsError names the file and the mend."""
    if plan.weights is not None:
        _verified(plan.weights, full=False, overrides=overrides)


def mend(error: Exception, overrides: list[str]) -> Exception:
    """`error` with its advice made the exact command for this config."""
    from appliance.weights.errors import WeightsError

    command = " ".join(["appliance fetch", *overrides])
    return WeightsError(str(error).replace("`appliance fetch", f"`{command}"))


def _verified(weights: WeightsPlan, *, full: bool, overrides: list[str]) -> Lock:
    from appliance.preflight.weights_check import verified
    from appliance.weights.errors import WeightsError

    try:
        return verified(weights, full=full)
    except WeightsError as error:
        raise mend(error, overrides) from None


def _path(name: str | None) -> Path | None:
    return Path(name).expanduser() if name else None


def _unpinned(plan: LaunchPlan) -> str:
    if plan.generate:
        return f"{plan.checkpoint} is embedded: `appliance serve` builds it and checks it against its recorded hash"
    if plan.model_path.startswith("/"):
        return f"{plan.checkpoint} is a local folder"
    problem = Problem(
        code="revision-unpinned",
        key="model.revision",
        message=f"{plan.checkpoint} names no revision to fetch",
        fix="Set model.revision to the hub commit to serve",
    )
    raise ConfigError((problem,))


def _cmd_store(args: argparse.Namespace) -> int:
    from rich.filesize import decimal

    from appliance.plan import build_plan, weights_dirs
    from appliance.weights.store import list_store, prune

    validated = validated_config(args, load_matrix())
    store, locks = weights_dirs(validated.config, validated.composed.site_dir)
    used = generations_using(build_plan(validated).state_dir)
    if args.prune:
        pruned = prune(store, set(used))
        for path in pruned.removed:
            out.print(f"removed {path}", markup=False)
        for path in pruned.busy:
            out.print(f"kept {path}: a fetch is running", markup=False)
        out.print(f"freed {decimal(pruned.freed_bytes)}; kept what the generations on this host use", markup=False)
        return 0
    listing = list_store(store, locks)
    for entry in listing.revisions:
        users = ", ".join(used.get((entry.checkpoint, entry.revision), ())) or "no generation on this host"
        detail = f" ({entry.detail})" if entry.detail else ""
        out.print(
            f"{entry.checkpoint}@{entry.revision}  {decimal(entry.size_bytes)}  {entry.state}{detail}  "
            f"used by: {users}",
            markup=False,
        )
    for left in listing.leftovers:
        what = "a fetch running" if left.running else "an interrupted fetch: run `appliance fetch` to finish it"
        out.print(f"{left.name}  {decimal(left.size_bytes)}  staging: {what}", markup=False)
    if not listing.revisions and not listing.leftovers:
        out.print(f"the store {store} is empty", markup=False)
    return 0


def generations_using(state_dir: str) -> dict[tuple[str, str], list[str]]:
    """(checkpoint, revision) -> the generations of this host's appliances that serve it (current or rollback)."""
    from appliance.cli.common import host_facts
    from appliance.compat.resolve import resolve_config
    from appliance.compat.validate import validate
    from appliance.plan import build_plan
    from appliance.rollout.generation import read_journal

    used: dict[tuple[str, str], list[str]] = {}
    matrix = load_matrix()
    for path in sorted(Path(state_dir).glob("generation-*.json")):
        journal = read_journal(path)
        if journal is None:
            continue
        site = Path(journal.site_dir) if journal.site_dir else None
        port = path.stem.removeprefix("generation-")
        for role, generation in (("current", journal.current), ("rollback", journal.previous)):
            if generation is None:
                continue
            composed = resolve_config(generation.overrides, matrix, host_facts, site_dir=site)  # as serve composes it
            weights = build_plan(validate(composed, matrix)).weights
            if weights is not None:
                used.setdefault((weights.checkpoint, weights.revision), []).append(
                    f"{generation.id} ({role}, control port {port})"
                )
    return used
