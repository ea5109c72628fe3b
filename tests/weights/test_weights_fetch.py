"""Fetching a revision into the store from a real nginx mirror: resumed, retried, checked, atomic.

Each test runs its own nginx (testkit/weights_mirror.py) and reads its access log to see what was asked.
"""

from __future__ import annotations

import errno
import hashlib
import io
import logging
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rich.console import Console

from appliance.weights.download import RetryPolicy
from appliance.weights.errors import DiskFull, WeightsError
from appliance.weights.fetch import FetchResult, fetch
from appliance.weights.layout import entry_dir, staging_dir
from appliance.weights.lock import Lock, write_lock
from appliance.weights.progress import FetchDisplay, FetchProgress
from appliance.weights.source import HttpSource, Token, open_source
from appliance.weights.verify import is_partial, verify
from testkit.helpers import free_port
from testkit.weights_mirror import (
    CHECKPOINT,
    OLD_REVISION,
    REVISION,
    Mirror,
    Nginx,
    build_mirror,
    child_fetch,
    lock_for,
    running_nginx,
    stalled_listener,
)

FAST = RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.05)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Mirror:
    return build_mirror(tmp_path_factory.mktemp("mirror"))


@pytest.fixture
def server(tmp_path: Path, mirror: Mirror) -> Iterator[Nginx]:
    with running_nginx(tmp_path / "nginx", mirror, free_port()) as nginx:
        yield nginx


def _fetch(
    base: str,
    store: Path,
    lock: Lock | None,
    *,
    jobs: int = 4,
    progress: FetchProgress | None = None,
    disk_reserve_bytes: int = 0,
) -> FetchResult:
    return fetch(
        HttpSource(base),
        CHECKPOINT,
        REVISION,
        store,
        lock,
        jobs=jobs,
        progress=progress,
        disk_reserve_bytes=disk_reserve_bytes,
        retry=FAST,
    )


def _one_line(error: pytest.ExceptionInfo[WeightsError]) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def test_a_first_fetch_records_every_files_sha256_and_the_entry_appears_verified(
    server: Nginx, mirror: Mirror, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    result = _fetch(server.url, store, None)
    assert [(f.path, f.size, f.sha256) for f in result.lock.files] == [
        (f.path, f.size, f.sha256) for f in lock_for(mirror.files).files
    ]
    assert (result.lock.source, result.entry, result.downloaded_bytes, result.joined) == (
        server.url,
        entry_dir(store, CHECKPOINT, REVISION),
        sum(map(len, mirror.files.values())),
        False,
    )
    assert (result.entry / "tokenizer" / "vocab.txt").read_bytes() == mirror.files["tokenizer/vocab.txt"]
    verify(store, result.lock, full=False)
    assert not staging_dir(store, CHECKPOINT, REVISION).exists()
    assert [r.uri for r in server.requests() if "/api/" in r.uri] == [f"/api/models/{CHECKPOINT}/tree/{REVISION}"]
    assert all(len(server.requests_for(path)) == 1 for path in mirror.files)


def test_a_locked_fetch_asks_for_no_listing_and_a_second_one_finds_the_entry(
    server: Nginx, mirror: Mirror, tmp_path: Path
) -> None:
    lock = lock_for(mirror.files)
    first = _fetch(server.url, tmp_path, lock)
    again = _fetch(server.url, tmp_path, lock)
    assert first.lock == again.lock == lock and (first.joined, again.joined) == (False, True)
    assert again.downloaded_bytes == 0 and not [r for r in server.requests() if "/api/" in r.uri]
    assert len(server.requests()) == len(mirror.files)


def test_a_mounted_folder_in_the_hubs_layout_gives_the_same_lock(mirror: Mirror, tmp_path: Path) -> None:
    result = fetch(open_source(mirror.root.as_uri()), CHECKPOINT, REVISION, tmp_path, None)
    assert result.lock.files == lock_for(mirror.files).files and result.lock.source == str(mirror.root)


def test_a_listing_in_pages_is_read_to_its_end_but_never_followed_to_another_host(
    server: Nginx, mirror: Mirror, tmp_path: Path
) -> None:
    result = _fetch(f"{server.url}/paged", tmp_path, None)
    assert result.lock.files == lock_for(mirror.files).files
    assert [r.uri for r in server.requests() if "pages" in r.uri or "/api/" in r.uri] == [
        f"/paged/api/models/{CHECKPOINT}/tree/{REVISION}",
        "/paged/pages/2.json",
    ]
    with pytest.raises(WeightsError) as raised:
        _fetch(f"{server.url}/hostile", tmp_path / "other", None)
    assert _one_line(raised).endswith(
        f"links its next page outside {server.url}/hostile: http://elsewhere.example/tree"
    )


@pytest.mark.parametrize("locked", [False, True], ids=["listing", "file"])
def test_a_404_is_one_line_naming_the_file_and_is_not_retried(
    server: Nginx, mirror: Mirror, tmp_path: Path, locked: bool
) -> None:
    lock = lock_for({**mirror.files, "missing.bin": b"never published"}) if locked else None
    revision = REVISION if locked else OLD_REVISION[::-1]
    with pytest.raises(WeightsError) as raised:
        fetch(HttpSource(server.url), CHECKPOINT, revision, tmp_path, lock, retry=FAST, jobs=1)
    what = "missing.bin" if locked else f"the listing of {CHECKPOINT}@{revision}"
    assert _one_line(raised).startswith(f"{what}: HTTP 404 from {server.url}/")
    assert [r.status for r in server.requests() if r.status == 404] == [404]
    assert not entry_dir(tmp_path, CHECKPOINT, revision).exists()
    assert server.connections() == []  # the unread answer's socket was closed with it


@pytest.mark.parametrize("locked", [False, True], ids=["listing", "file"])
def test_a_500_is_retried_a_bounded_number_of_times_then_reported_in_one_line(
    server: Nginx, mirror: Mirror, tmp_path: Path, locked: bool
) -> None:
    with pytest.raises(WeightsError) as raised:
        _fetch(f"{server.url}/error", tmp_path, lock_for(mirror.files) if locked else None, jobs=1)
    what = "config.json" if locked else f"the listing of {CHECKPOINT}@{REVISION}"
    assert _one_line(raised).startswith(f"{what}: HTTP 500 from {server.url}/error/")
    assert raised.value.args[0].endswith(f" (gave up after {FAST.attempts} attempts)")
    assert [r.status for r in server.requests()] == [500] * FAST.attempts
    assert server.connections() == []


def test_a_connection_closed_without_an_answer_is_retried_then_reported(
    server: Nginx, mirror: Mirror, tmp_path: Path
) -> None:
    with pytest.raises(WeightsError) as raised:
        _fetch(f"{server.url}/reset", tmp_path, lock_for(mirror.files), jobs=1)
    assert _one_line(raised).startswith(f"config.json: ProtocolError from {server.url}/reset/")
    assert raised.value.args[0].endswith(f"(gave up after {FAST.attempts} attempts)")
    assert [r.status for r in server.requests()] == [444] * FAST.attempts


def test_a_server_that_stops_answering_times_out_and_is_retried(mirror: Mirror, tmp_path: Path) -> None:
    with stalled_listener() as (url, accepted), pytest.raises(WeightsError) as raised:
        fetch(
            HttpSource(url, read_timeout_s=0.3),
            CHECKPOINT,
            REVISION,
            tmp_path,
            lock_for(mirror.files),
            jobs=1,
            retry=RetryPolicy(attempts=2, backoff_s=0.01),
        )
    assert _one_line(raised).startswith(f"config.json: ReadTimeoutError from {url}/")
    assert raised.value.args[0].endswith("(gave up after 2 attempts)") and len(accepted) == 2


def test_other_bytes_under_the_locked_revision_are_refused_naming_the_file_and_the_store_is_untouched(
    server: Nginx, mirror: Mirror, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    old = fetch(HttpSource(server.url), CHECKPOINT, OLD_REVISION, store, None).lock
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in store.rglob("*") if p.is_file()}
    lock = lock_for(mirror.files)
    with pytest.raises(WeightsError) as raised:
        _fetch(f"{server.url}/other", store, lock, jobs=1)
    expected, served = lock.files[2].sha256, hashlib.sha256(mirror.files["model.safetensors"][::-1]).hexdigest()
    assert lock.files[2].path == "model.safetensors"
    assert _one_line(raised).startswith(
        f"model.safetensors: sha256 {served[:12]}… differs from the lock ({expected[:12]}…): "
        f"{server.url}/other/{CHECKPOINT}/resolve/{REVISION}/model.safetensors serves other bytes"
    )
    staging = staging_dir(store, CHECKPOINT, REVISION)
    assert sorted(p.name for p in staging.iterdir()) == ["config.json", "extra.bin"]  # the bad file is not kept,
    # and the file after it was not begun
    assert not entry_dir(store, CHECKPOINT, REVISION).exists() and is_partial(store, CHECKPOINT, REVISION)
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in before} == before
    verify(store, old, full=True)


def test_without_a_lock_an_lfs_file_must_match_the_sha256_of_the_listing(
    server: Nginx, mirror: Mirror, tmp_path: Path
) -> None:
    with pytest.raises(WeightsError, match=r"^model\.safetensors: sha256 \w{12}… differs from the listing"):
        _fetch(f"{server.url}/other", tmp_path, None)
    assert not entry_dir(tmp_path, CHECKPOINT, REVISION).exists()


@pytest.mark.parametrize(("location", "status"), [("", 206), ("/norange", 200)], ids=["range", "no-range"])
def test_a_part_left_by_an_interrupted_fetch_is_resumed_with_a_range_request(
    server: Nginx, mirror: Mirror, tmp_path: Path, location: str, status: int
) -> None:
    data = mirror.files["model.safetensors"]
    part = staging_dir(tmp_path, CHECKPOINT, REVISION) / "model.safetensors.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(data[: len(data) // 2])
    result = _fetch(server.url + location, tmp_path, lock_for(mirror.files))
    [asked] = server.requests_for("model.safetensors")
    assert (asked.range, asked.status) == (f"bytes={len(data) // 2}-", status)  # 200: the server ignored it
    assert (result.entry / "model.safetensors").read_bytes() == data
    verify(tmp_path, result.lock, full=True)


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_fetch_killed_mid_file_leaves_no_entry_and_the_next_one_resumes_it(
    server: Nginx, mirror: Mirror, tmp_path: Path
) -> None:
    lock_file = tmp_path / "lock.json"
    write_lock(lock_file, lock_for(mirror.files))
    store = tmp_path / "store"
    part = staging_dir(store, CHECKPOINT, REVISION) / "model.safetensors.part"
    child = child_fetch(f"{server.url}/slow", store, lock_file)
    _wait_for(lambda: part.exists() and part.stat().st_size >= 256 << 10, "the child's download")
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    assert not entry_dir(store, CHECKPOINT, REVISION).exists() and is_partial(store, CHECKPOINT, REVISION)
    kept = part.stat().st_size
    result = _fetch(server.url, store, lock_for(mirror.files))
    resumed = server.requests_for("model.safetensors")[-1]
    assert (resumed.range, resumed.status) == (f"bytes={kept}-", 206)
    verify(store, result.lock, full=True)


def test_two_fetches_of_one_revision_download_it_once(server: Nginx, mirror: Mirror, tmp_path: Path) -> None:
    lock_file = tmp_path / "lock.json"
    write_lock(lock_file, lock_for(mirror.files))
    store = tmp_path / "store"
    child = child_fetch(f"{server.url}/slow", store, lock_file)
    _wait_for(lambda: any(staging_dir(store, CHECKPOINT, REVISION).glob("*.part")), "the child's download")
    result = _fetch(server.url, store, lock_for(mirror.files))  # waits for the child's fetch, then joins it
    assert child.wait(10) == 0 and result.joined
    assert all(len(server.requests_for(path)) == 1 for path in mirror.files)
    verify(store, result.lock, full=True)


def test_a_fetch_the_disk_cannot_hold_is_refused_before_any_request(
    server: Nginx, mirror: Mirror, tmp_path: Path
) -> None:
    reserve = shutil.disk_usage(tmp_path).free
    with pytest.raises(WeightsError) as raised:
        _fetch(server.url, tmp_path, lock_for(mirror.files), disk_reserve_bytes=reserve)
    assert f": not enough disk space in {tmp_path}: 5.8 MB to download and " in _one_line(raised)
    assert server.requests() == []


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MB tmpfs (the tests run as root here); skipped where mounting is not allowed."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_disk_that_fills_during_the_fetch_is_one_line_and_the_staging_folder_is_removed(
    server: Nginx, mirror: Mirror, small_disk: Path
) -> None:
    store = small_disk / "store"
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            _fetch(f"{server.url}/slow", store, lock_for(mirror.files))
        except WeightsError as error:
            outcome.append(error)

    fetching = threading.Thread(target=run)
    fetching.start()
    _wait_for(lambda: any(staging_dir(store, CHECKPOINT, REVISION).glob("*.part")), "the download")
    _fill(small_disk / "ballast")  # another writer takes the rest of the disk
    fetching.join(10)
    [error] = outcome
    assert isinstance(error, DiskFull) and str(error).startswith(f"disk full writing {store}/.staging/")
    assert not staging_dir(store, CHECKPOINT, REVISION).exists()
    assert not entry_dir(store, CHECKPOINT, REVISION).exists()
    assert server.connections() == []  # neither the files cancelled mid-body nor those done keep a socket


def _fill(path: Path) -> None:
    with path.open("wb", buffering=0) as file:
        try:
            while True:
                file.write(b"\0" * (64 << 10))
        except OSError as error:
            assert error.errno == errno.ENOSPC


@pytest.mark.parametrize(
    ("checkpoint", "revision"),
    [(CHECKPOINT, "main"), ("../etc", REVISION), ("acme/../../x", REVISION), ("/abs/x", REVISION)],
)
def test_a_bad_name_is_refused_before_any_request(
    server: Nginx, tmp_path: Path, checkpoint: str, revision: str
) -> None:
    with pytest.raises(WeightsError, match=r"^(checkpoint|revision) '"):
        fetch(HttpSource(server.url), checkpoint, revision, tmp_path / "store", None)
    assert server.requests() == [] and not (tmp_path / "store").exists()


def test_the_hub_token_is_sent_and_appears_in_no_message_or_log(
    server: Nginx, mirror: Mirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "hf_sEcReT0123456789"
    monkeypatch.setenv("WEIGHTS_TEST_TOKEN", secret)
    caplog.set_level(logging.DEBUG)
    token = Token(env="WEIGHTS_TEST_TOKEN")
    messages = []
    for store, base, files in (
        (tmp_path / "a", server.url, {**mirror.files, "missing.bin": b"x"}),
        (tmp_path / "b", f"{server.url}/error", mirror.files),
    ):
        with pytest.raises(WeightsError) as raised:
            fetch(HttpSource(base, token=token), CHECKPOINT, REVISION, store, lock_for(files), retry=FAST)
        messages.append(str(raised.value))
    assert {r.auth for r in server.requests()} == {f"Bearer {secret}"}
    assert caplog.records and secret not in caplog.text and not any(secret in m for m in messages)


def test_progress_is_one_plain_line_per_file_off_a_terminal_and_rich_rows_on_one(
    server: Nginx, mirror: Mirror, tmp_path: Path
) -> None:
    plain, rich = io.StringIO(), io.StringIO()
    _fetch(server.url, tmp_path / "a", None, progress=FetchDisplay(Console(file=plain, width=200)))
    lines = plain.getvalue().splitlines()
    assert sorted(line.split(":")[0] for line in lines) == sorted(f"[fetch] {p}" for p in mirror.files)
    assert "[fetch] model.safetensors: 3.1 MB (" in plain.getvalue() and all(line.endswith("/s)") for line in lines)
    _fetch(server.url, tmp_path / "b", None, progress=FetchDisplay(Console(file=rich, force_terminal=True, width=120)))
    assert "all files" in rich.getvalue() and "[fetch] model.safetensors" in rich.getvalue()
