"""build/cpu/install.sh's torch source: a local wheel folder, else the PyTorch CPU index by hash, else one line.

The index is a real HTTP server on loopback (Python's http.server serving a PEP 503 directory
listing), and pip fetches from it: the real PyTorch index is out of this machine's reach.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.engines.pins import BUILD_DIR
from testkit.helpers import free_port

INSTALL = BUILD_DIR / "cpu" / "install.sh"
TORCH = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
LOCAL_TORCH = Path("/opt/wheels") / TORCH
UV = Path(sys.executable).with_name("uv")


def install(venv: Path, wheels: Path, index: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"UV": str(UV), "APPLIANCE_TORCH_WHEELS": str(wheels), "APPLIANCE_TORCH_INDEX": index}
    return subprocess.run(["bash", str(INSTALL), str(venv)], env=env, capture_output=True, text=True, timeout=900)


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def index(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(URL, folder) of a simple index served over HTTP: put `torch/<wheel>` in the folder."""
    root = tmp_path / "index"
    (root / "torch").mkdir(parents=True)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while not listening(port):
            assert time.monotonic() < deadline, "the index server did not start"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/", root
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_without_the_wheel_or_a_reachable_index_the_install_says_what_it_needs_in_one_line(tmp_path: Path) -> None:
    empty, closed = tmp_path / "no-torch-here", f"http://127.0.0.1:{free_port()}/whl/cpu"
    empty.mkdir()
    done = install(tmp_path / "engines" / "cpu", empty, closed)
    assert done.returncode == 3, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert errors == [
        f"[install-cpu-engine] error: torch 2.13.0+cpu is not in {empty} (APPLIANCE_TORCH_WHEELS) and could not be "
        f"fetched from {closed} (APPLIANCE_TORCH_INDEX): cannot reach it: [Errno 111] Connection refused; put the "
        "wheel in that folder or point APPLIANCE_TORCH_INDEX at a reachable PyTorch CPU wheel index"
    ]
    assert sorted(path.name for path in (tmp_path / "engines").iterdir()) == [".cpu.install-lock"]


def test_a_wheel_from_the_index_that_does_not_match_the_locked_hash_is_refused(
    tmp_path: Path, index: tuple[str, Path]
) -> None:
    url, root = index
    (root / "torch" / TORCH).write_bytes(b"not the locked torch")
    empty = tmp_path / "no-torch-here"
    empty.mkdir()
    done = install(tmp_path / "engines" / "cpu", empty, url)
    assert done.returncode == 3, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert f"could not be fetched from {url} (APPLIANCE_TORCH_INDEX): THESE PACKAGES DO NOT MATCH THE HASHES" in last
    assert sorted(path.name for path in (tmp_path / "engines").iterdir()) == [".cpu.install-lock"]


@pytest.mark.engine
@pytest.mark.skipif(not LOCAL_TORCH.is_file(), reason=f"the index is served from {LOCAL_TORCH}")
def test_the_torch_wheel_comes_from_the_index_by_hash_when_no_folder_holds_it(
    tmp_path: Path, index: tuple[str, Path]
) -> None:
    url, root = index
    (root / "torch" / TORCH).symlink_to(LOCAL_TORCH)
    empty = tmp_path / "no-torch-here"
    empty.mkdir()
    done = install(tmp_path / "engines" / "cpu", empty, url)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"torch 2.13.0+cpu is not in {empty}: fetching it from {url}" in done.stderr
    assert (tmp_path / "engines" / ".wheels" / TORCH).is_file()
    assert "0.32.0 2.13.0+cpu" in done.stdout
