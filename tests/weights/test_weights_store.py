"""A store entry checked against its lock (quick at every boot, full on demand), mended, listed and pruned."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from filelock import FileLock

from appliance.weights.errors import WeightsError
from appliance.weights.fetch import fetch
from appliance.weights.layout import entry_dir, fetch_lock_file, lock_path, staging_dir, stamp_file
from appliance.weights.lock import Lock, write_lock
from appliance.weights.source import FolderSource, HttpSource
from appliance.weights.store import list_store, prune
from appliance.weights.verify import is_partial, verify
from testkit.helpers import free_port
from testkit.weights_mirror import (
    CHECKPOINT,
    OLD_CONFIG,
    OLD_REVISION,
    REVISION,
    Mirror,
    Nginx,
    build_mirror,
    running_nginx,
)

NAME = f"{CHECKPOINT}@{REVISION}"


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Mirror:
    return build_mirror(tmp_path_factory.mktemp("mirror"))


@pytest.fixture
def fetched(mirror: Mirror, tmp_path: Path) -> tuple[Path, Lock]:
    """A store holding the pinned revision (fetched from the mirror's folder) and its lock."""
    store = tmp_path / "store"
    return store, fetch(FolderSource(mirror.root), CHECKPOINT, REVISION, store, None).lock


def _fault(store: Path, lock: Lock, *, full: bool) -> str:
    with pytest.raises(WeightsError) as raised:
        verify(store, lock, full=full)
    assert "\n" not in str(raised.value)
    return str(raised.value)


def _flip_a_byte(path: Path, *, keep_mtime: bool) -> None:
    stat = path.stat()
    with path.open("r+b") as file:
        file.seek(1000)
        byte = file.read(1)
        file.seek(1000)
        file.write(bytes([byte[0] ^ 0xFF]))
    if keep_mtime:
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_a_fetched_entry_passes_both_checks(fetched: tuple[Path, Lock]) -> None:
    store, lock = fetched
    verify(store, lock, full=False)
    verify(store, lock, full=True)


def test_a_file_rewritten_in_place_fails_the_quick_check_which_names_it_and_the_rehash(
    fetched: tuple[Path, Lock],
) -> None:
    store, lock = fetched
    _flip_a_byte(entry_dir(store, CHECKPOINT, REVISION) / "model.safetensors", keep_mtime=False)
    assert _fault(store, lock, full=False) == (
        f"{NAME}: model.safetensors changed since it was verified; run `appliance fetch --verify` to re-hash it"
    )


def test_a_flipped_byte_behind_a_restored_mtime_is_found_by_the_full_check_only(fetched: tuple[Path, Lock]) -> None:
    store, lock = fetched
    _flip_a_byte(entry_dir(store, CHECKPOINT, REVISION) / "model.safetensors", keep_mtime=True)
    verify(store, lock, full=False)  # the quick check's known limit: it hashes nothing
    assert _fault(store, lock, full=True).startswith(f"{NAME}: model.safetensors: sha256 ")
    expected = lock.files[2].sha256[:12]
    assert _fault(store, lock, full=True).endswith(
        f"differs from the lock ({expected}…); run `appliance fetch` to fetch it again"
    )


@pytest.mark.parametrize(
    ("damage", "fault"),
    [
        (lambda e: (e / "extra.bin").unlink(), "extra.bin is missing from {entry}; run `appliance fetch`"),
        (lambda e: os.truncate(e / "extra.bin", 10), "extra.bin has 10 bytes, the lock says 1572864; run `appliance"),
        (lambda e: (e / "tokenizer" / "run_me.py").write_text(""), "tokenizer/run_me.py is in {entry} but not in"),
    ],
    ids=["missing", "size", "stray"],
)
def test_a_missing_resized_or_stray_file_is_named_by_the_quick_check(
    fetched: tuple[Path, Lock], damage: Callable[[Path], object], fault: str
) -> None:
    store, lock = fetched
    entry = entry_dir(store, CHECKPOINT, REVISION)
    damage(entry)
    assert _fault(store, lock, full=False).startswith(f"{NAME}: {fault.format(entry=entry)}")


def test_the_stamp_must_be_of_this_lock(fetched: tuple[Path, Lock], mirror: Mirror) -> None:
    store, lock = fetched
    stamp_file(store, CHECKPOINT, REVISION).unlink()
    assert _fault(store, lock, full=False).endswith(
        "never verified against its lock; run `appliance fetch --verify` to re-hash it"
    )
    verify(store, lock, full=True)  # rewrites the stamp
    verify(store, lock, full=False)


def test_an_interrupted_fetch_is_partial_and_an_absent_one_is_not_in_the_store(
    fetched: tuple[Path, Lock], mirror: Mirror
) -> None:
    store, lock = fetched
    other = Lock(CHECKPOINT, OLD_REVISION, lock.recorded_at, lock.source, lock.files)
    assert (
        _fault(store, other, full=False) == f"{CHECKPOINT}@{OLD_REVISION}: not in the store {store}; run "
        "`appliance fetch` to fetch it"
    )
    staging_dir(store, CHECKPOINT, OLD_REVISION).mkdir(parents=True)
    assert is_partial(store, CHECKPOINT, OLD_REVISION) and not is_partial(store, CHECKPOINT, REVISION)
    assert "partial: a fetch was interrupted; run `appliance fetch` to finish it" in _fault(store, other, full=False)


@pytest.fixture
def server(tmp_path: Path, mirror: Mirror) -> Iterator[Nginx]:
    with running_nginx(tmp_path / "nginx", mirror, free_port()) as nginx:
        yield nginx


def test_a_fetch_mends_a_damaged_entry_by_fetching_only_the_files_that_differ(
    fetched: tuple[Path, Lock], server: Nginx
) -> None:
    store, lock = fetched
    entry = entry_dir(store, CHECKPOINT, REVISION)
    _flip_a_byte(entry / "model.safetensors", keep_mtime=False)
    (entry / "tokenizer" / "run_me.py").write_text("")
    (entry / "extra.bin").unlink()
    result = fetch(HttpSource(server.url), CHECKPOINT, REVISION, store, lock)
    assert not result.joined and result.downloaded_bytes == lock.files[1].size + lock.files[2].size
    assert sorted(r.uri.rsplit("/", 1)[1] for r in server.requests()) == ["extra.bin", "model.safetensors"]
    verify(store, lock, full=True)


def test_the_listing_gives_each_revision_its_size_and_state_and_the_staging_leftovers(
    fetched: tuple[Path, Lock], mirror: Mirror, tmp_path: Path
) -> None:
    store, lock = fetched
    fetch(FolderSource(mirror.root), CHECKPOINT, OLD_REVISION, store, None)
    locks = tmp_path / "locks"
    write_lock(lock_path(locks, CHECKPOINT, REVISION), lock)
    staging_dir(store, "acme/other", REVISION).mkdir(parents=True)
    (staging_dir(store, "acme/other", REVISION) / "a.part").write_bytes(b"12345")
    listing = list_store(store, locks)
    assert [(r.revision, r.size_bytes, r.state) for r in listing.revisions] == [
        (REVISION, sum(f.size for f in lock.files), "verified"),
        (OLD_REVISION, sum(f.size for f in lock.files) - lock.files[0].size + len(OLD_CONFIG), "no lock"),
    ]
    assert [(x.name, x.size_bytes, x.running) for x in listing.leftovers] == [(f"acme__other@{REVISION}", 5, False)]
    os.utime(entry_dir(store, CHECKPOINT, REVISION) / "config.json")
    [changed] = [r for r in list_store(store, locks).revisions if r.revision == REVISION]
    assert changed.state == "changed since verified" and "config.json changed since it was verified" in changed.detail


def test_prune_removes_what_is_not_kept_but_not_what_a_fetch_holds_or_may_resume(
    fetched: tuple[Path, Lock], mirror: Mirror
) -> None:
    store, lock = fetched
    fetch(FolderSource(mirror.root), CHECKPOINT, OLD_REVISION, store, None)
    old_size = sum(p.stat().st_size for p in entry_dir(store, CHECKPOINT, OLD_REVISION).rglob("*") if p.is_file())
    resumable, stale, held = (staging_dir(store, c, REVISION) for c in ("acme/next", "acme/gone", "acme/busy"))
    for folder in (resumable, stale, held):
        folder.mkdir(parents=True)
    fetch_lock_file(store, "acme/busy", REVISION).parent.mkdir(parents=True, exist_ok=True)
    with FileLock(fetch_lock_file(store, "acme/busy", REVISION)):
        result = prune(store, {(CHECKPOINT, REVISION), ("acme/next", REVISION)})
    assert sorted(result.removed) == sorted([entry_dir(store, CHECKPOINT, OLD_REVISION), stale])
    assert result.freed_bytes == old_size and result.busy == (held,)
    assert not stamp_file(store, CHECKPOINT, OLD_REVISION).exists() and resumable.is_dir()
    verify(store, lock, full=True)
    assert prune(store, set()).removed == (entry_dir(store, CHECKPOINT, REVISION), held, resumable)
    assert sorted(p.name for p in store.iterdir()) == [".locks", ".staging"]
    shutil.rmtree(store)
