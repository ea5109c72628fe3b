"""Issue 51 through the commands an operator runs: `appliance fetch` from a real nginx mirror in the hub's layout,
`fetch --verify`, `store`, and the refusals of `serve` and `check` before anything is spawned (exit 3, one line
naming the file and the exact `appliance fetch` that mends it).

The checkpoint is SmolLM2's hub name (models/smollm2.yaml lists it); the mirror carries small stand-in files under
it, since what is checked here is the store and the lock, not the model (the engine tier serves the real files).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testkit.helpers import Cli, free_port
from testkit.weights_mirror import Mirror, Nginx, mirror_files, publish, running_nginx

CHECKPOINT = "HuggingFaceTB/SmolLM2-135M-Instruct"
REVISION = hashlib.sha1(b"smollm2 as the site pinned it").hexdigest()


@dataclass(frozen=True)
class Site:
    overrides: tuple[str, ...]
    store: Path
    lock: Path
    nginx: Nginx

    @property
    def entry(self) -> Path:
        return self.store / CHECKPOINT / REVISION


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    root = tmp_path / "mirror"
    publish(root, CHECKPOINT, REVISION, mirror_files())
    with running_nginx(tmp_path / "nginx", Mirror(root, root, mirror_files()), free_port()) as nginx:
        store, locks = tmp_path / "store", tmp_path / "locks"
        overrides = (
            "model=smollm2",
            f"model.checkpoint={CHECKPOINT}",
            f"model.revision={REVISION}",
            f"site.weights.mirror={nginx.url}",
            f"site.weights.store_dir={store}",
            f"site.weights.locks_dir={locks}",
        )
        yield Site(overrides, store, locks / CHECKPOINT / f"{REVISION}.lock.json", nginx)


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


def test_the_first_fetch_records_the_lock_and_the_next_is_checked_against_it(cli: Cli, site: Site) -> None:
    first = cli("fetch", *site.overrides)
    assert first.returncode == 0, first.stderr
    assert "recorded the weights lock" in first.stderr and f"fetched: {CHECKPOINT}@{REVISION}" in first.stdout
    lock = json.loads(site.lock.read_text())
    assert {f["path"]: f["size"] for f in lock["files"]} == {p: len(d) for p, d in mirror_files().items()}
    assert sorted(p.name for p in site.entry.rglob("*") if p.is_file()) == sorted(Path(p).name for p in mirror_files())
    again = cli("fetch", *site.overrides)
    assert again.returncode == 0 and "already in the store" in again.stdout
    verified = cli("fetch", "--verify", *site.overrides)
    assert verified.returncode == 0 and f"verified: {CHECKPOINT}@{REVISION}, 4 files" in verified.stdout
    listed = cli("store", *site.overrides)
    assert f"{CHECKPOINT}@{REVISION}" in listed.stdout and "verified" in listed.stdout


def test_serve_and_check_refuse_a_checkpoint_never_fetched_naming_the_command_that_mends_it(
    cli: Cli, site: Site
) -> None:
    served = cli("serve", *site.overrides)
    line = one_line(served.stderr)
    assert served.returncode == 3 and "no weights lock" in line
    assert f"`appliance fetch {' '.join(site.overrides)}`" in line
    assert site.nginx.requests() == []  # serve fetches nothing on its own
    checked = cli("check", "--no-probe", "--json", *site.overrides)
    weights = next(c for c in json.loads(checked.stdout)["checks"] if c["id"] == "host.weights")
    assert weights["status"] == "fail" and "no weights lock" in weights["summary"]


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "removed", "interrupted fetch"])
def test_a_damaged_store_is_refused_by_serve_and_named_by_verify(cli: Cli, site: Site, damage: str) -> None:
    assert cli("fetch", *site.overrides).returncode == 0
    shard = site.entry / "model.safetensors"
    if damage == "flipped byte":
        data = bytearray(shard.read_bytes())
        data[1000] ^= 1
        shard.write_bytes(bytes(data))
    elif damage == "truncated":
        os.truncate(shard, 1000)
    elif damage == "removed":
        shard.unlink()
    else:  # a fetch killed before its rename: staging present, the entry absent
        staging = site.store / ".staging" / f"{CHECKPOINT.replace('/', '__')}@{REVISION}"
        site.entry.rename(staging)
    served = cli("serve", *site.overrides)
    line = one_line(served.stderr)
    assert served.returncode == 3 and "appliance fetch" in line
    expected = {
        "flipped byte": "model.safetensors",
        "truncated": "model.safetensors has 1000 bytes",
        "removed": "model.safetensors is missing",
        "interrupted fetch": "partial",
    }[damage]
    assert expected in line, line
    if damage == "flipped byte":
        verified = cli("fetch", "--verify", *site.overrides)
        assert verified.returncode == 3 and "model.safetensors" in one_line(verified.stderr)
    mended = cli("fetch", *site.overrides)  # fetches only what differs, then serve would go on
    assert mended.returncode == 0, mended.stderr
    assert cli("fetch", "--verify", *site.overrides).returncode == 0


def test_a_malformed_lock_is_one_line_naming_it(cli: Cli, site: Site) -> None:
    site.lock.parent.mkdir(parents=True)
    site.lock.write_text('{"checkpoint": "x"')
    fetched = cli("fetch", *site.overrides)
    assert fetched.returncode == 3 and str(site.lock) in one_line(fetched.stderr)
    assert site.nginx.requests() == []


@pytest.mark.parametrize(
    ("override", "key"), [("model.revision=main", "model.revision"), ("model.revision=0123abc", "model.revision")]
)
def test_a_revision_that_is_not_a_commit_is_refused_before_any_request(
    cli: Cli, site: Site, override: str, key: str
) -> None:
    fetched = cli("fetch", *site.overrides, override)
    assert fetched.returncode == 2 and key in one_line(fetched.stderr)
    assert site.nginx.requests() == []


def test_the_embedded_default_has_nothing_to_fetch(cli: Cli) -> None:
    ran = cli("fetch")
    assert ran.returncode == 0 and "embedded" in ran.stdout


def test_a_tt_plan_keys_its_tensor_cache_and_state_says_whether_it_is_built(tmp_path: Path) -> None:
    """The cache folder moves with each thing that invalidates it; GET /state (what `status` and the console read)
    carries the pinned weights and the cache's state."""
    from appliance.compat.matrix import load_matrix
    from appliance.compat.validate import validate
    from appliance.config.compose import compose_config
    from appliance.control.api import state_document
    from appliance.plan import build_plan
    from appliance.runtime.lifecycle import EngineState
    from appliance.runtime.supervisor import SupervisorSnapshot
    from appliance.runtime.tensor_cache import mark_built

    def plan(*extra: str) -> Any:
        base = ["+model=llama", "mesh=t3k", f"paths.cache_dir={tmp_path}", f"model.revision={REVISION}", *extra]
        return build_plan(validate(compose_config(base), load_matrix()))

    pinned = plan()
    assert pinned.tensor_cache is not None and pinned.env["TT_CACHE_PATH"] == pinned.tensor_cache
    assert REVISION in pinned.tensor_cache and pinned.env["HF_HUB_OFFLINE"] == "1"
    others = {
        plan(f"model.revision={'1' * 39}a").tensor_cache,
        plan("mesh=galaxy_t3k").tensor_cache,
        plan("precision=performance").tensor_cache,
    }
    assert pinned.tensor_cache not in others and len(others) == 3
    snapshot = SupervisorSnapshot(EngineState.LOADING, None, None, 0, None, ())
    cold = state_document(snapshot, pinned)
    assert cold.tensor_cache is not None and not cold.tensor_cache.built
    assert cold.weights is not None and cold.weights.revision == REVISION
    mark_built(pinned.tensor_cache, 3101.0, 1.0)
    warm = state_document(snapshot, pinned).tensor_cache
    assert warm is not None and warm.built and warm.boot_s == 3101.0


def test_the_store_says_which_generations_use_each_revision_and_prune_keeps_those(
    cli: Cli, site: Site, tmp_path: Path
) -> None:
    """Two revisions fetched; this host's appliance serves the new one with the old one as its rollback, and a third
    is used by nobody: prune removes only that one."""
    from appliance.control.upgrade_documents import GenerationDocument
    from appliance.rollout.generation import Journal, journal_path, write_journal

    revisions = [hashlib.sha1(f"revision {n}".encode()).hexdigest() for n in range(3)]
    root = tmp_path / "mirror"
    for revision in revisions:
        publish(root, CHECKPOINT, revision, mirror_files())
    state = tmp_path / "state"
    pinned = [
        (*site.overrides[:2], f"model.revision={r}", *site.overrides[3:], f"paths.state_dir={state}") for r in revisions
    ]
    for overrides in pinned:
        assert cli("fetch", *overrides).returncode == 0
    generation = [GenerationDocument(f"g{n}", overrides, "python") for n, overrides in enumerate(pinned)]
    write_journal(journal_path(str(state), 8100), Journal(pinned[1], None, generation[1], previous=generation[0]))
    ran = cli("store", *pinned[0])
    listed = ran.stdout
    assert ran.returncode == 0, ran.stderr
    assert f"{revisions[1]}" in listed and "g1 (current, control port 8100)" in listed
    assert "g0 (rollback, control port 8100)" in listed
    assert f"{revisions[2]}  " in listed and "no generation on this host" in listed
    pruned = cli("store", "--prune", *pinned[0])
    assert pruned.returncode == 0 and f"removed {site.store / CHECKPOINT / revisions[2]}" in pruned.stdout
    assert sorted(p.name for p in (site.store / CHECKPOINT).iterdir() if not p.name.startswith(".")) == sorted(
        revisions[:2]
    )
