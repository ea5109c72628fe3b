"""sd_notify from a real `appliance serve` on the real CPU engine, read from a real datagram socket."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .helpers import TINY, free_port, group_gone

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(
        not (ROOT / ".engines" / "cpu" / ".appliance-engine-ok").is_file(), reason="the CPU engine is not built"
    ),
]


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify.sock"))
    try:
        yield sock
    finally:
        sock.close()


def receive(sock: socket.socket, proc: subprocess.Popen[bytes], timeout: float, until: str | None) -> list[str]:
    """Datagrams until one contains `until`, or (until=None) until serve has exited and the socket is drained."""
    messages: list[str] = []
    deadline = time.monotonic() + timeout
    sock.settimeout(0.5)
    while time.monotonic() < deadline:
        try:
            messages.append(sock.recv(4096).decode())
        except TimeoutError:
            if proc.poll() is not None:
                if until is None:
                    return messages
                raise AssertionError(f"serve exited {proc.returncode}; notifications: {messages}") from None
            continue
        if until is not None and until in messages[-1]:
            return messages
    raise AssertionError(f"gave up after {timeout}s; notifications: {messages}")


def states(messages: list[str]) -> list[str]:
    return [m.split("STATUS=", 1)[1].split(":")[0] for m in messages]


def test_serve_notifies_ready_every_state_and_stopping(notify_socket: socket.socket, tmp_path: Path) -> None:
    token, control = secrets.token_urlsafe(16), free_port()
    env = os.environ | {
        "NOTIFY_SOCKET": notify_socket.getsockname(),
        "APPLIANCE_TOKEN": token,
        "APPLIANCE_STATE_DIR": str(tmp_path / "state"),
        "APPLIANCE_LOG_DIR": str(tmp_path / "logs"),
    }
    command = [sys.executable, "-m", "appliance.cli", "serve", "mesh=cpu", TINY, f"serving.port={free_port()}",
               f"control.port={control}"]  # fmt: skip
    with (tmp_path / "serve.out").open("wb") as sink:
        proc = subprocess.Popen(command, env=env, stdout=sink, stderr=sink)
    try:
        booted = receive(notify_socket, proc, 300, until="READY=1")
        state = httpx.get(f"http://127.0.0.1:{control}/state", headers={"Authorization": f"Bearer {token}"}).json()
        proc.send_signal(signal.SIGTERM)
        stopped = receive(notify_socket, proc, 120, until=None)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert states(booted) == ["starting", "loading", "warming", "ready"]
    assert booted[-1].startswith("READY=1\nSTATUS=ready") and state["state"] == "ready"
    assert proc.returncode == 143
    assert stopped[0] == "STOPPING=1\nSTATUS=stopping"
    assert states(stopped[1:]) == ["draining", "stopped"]
    assert group_gone(state["pid"])
