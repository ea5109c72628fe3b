"""A weights mirror for the tests: files in the hub's layout, served by a real nginx that honours Range.

The nginx (Debian's, `make nginx`) runs in the foreground on a loopback port with its own prefix; its access
log has one JSON line per request (`$http_range` and `$http_authorization` included), so a test can see what
the server was asked. Locations beside the plain mirror inject the faults:

    /slow/      the mirror at 2 MB/s per connection (a fetch still running when a test acts)
    /norange/   the mirror without Range support (answers 200 with the whole file)
    /other/     a second mirror serving other bytes under the same revision and the same listing
    /paged/     the mirror with its listing in two pages, linked as the hub links them (`Link: rel="next"`)
    /hostile/   a listing whose next page lies on another host (the token must not follow it there)
    /reset/     closes every connection without an answer (nginx's 444)
    /error/     HTTP 500 to everything

Run as a script (`python testkit/weights_mirror.py BASE STORE LOCK`) it is a fetch in a child process, for the
tests that kill one or run two at once; it imports only the appliance, so it starts quickly.
"""

from __future__ import annotations

import hashlib
import json
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from appliance.weights.fetch import fetch
from appliance.weights.lock import Lock, LockedFile, read_lock
from appliance.weights.source import HttpSource

CHECKPOINT = "acme/tiny-llm"
REVISION = hashlib.sha1(b"the pinned commit").hexdigest()
OLD_REVISION = hashlib.sha1(b"the commit before").hexdigest()
LFS = {"model.safetensors"}
"""The files the listing gives as LFS, with their sha256."""
OLD_CONFIG = b'{"hidden_size": 32}'
"""The one file the revision before differs in."""
NGINX = "/usr/sbin/nginx"


@dataclass(frozen=True)
class Mirror:
    root: Path
    other: Path
    """The same listing, with other bytes in `tokenizer/vocab.txt` and `model.safetensors`."""
    files: dict[str, bytes]


@dataclass(frozen=True)
class Request:
    method: str
    uri: str
    status: int
    range: str
    auth: str


@dataclass(frozen=True)
class Nginx:
    url: str
    log: Path

    def requests(self) -> list[Request]:
        """Every request logged, once the log is still for 50 ms: nginx logs a request just after its last byte."""
        lines, before = self._lines(), None
        while lines != before:
            time.sleep(0.05)
            lines, before = self._lines(), lines
        return [Request(**{k: v for k, v in json.loads(line).items() if k != "sent"}) for line in lines]

    def _lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def requests_for(self, path: str) -> list[Request]:
        return [r for r in self.requests() if r.uri.endswith(f"/{path}")]

    def connections(self) -> list[str]:
        """The states of this process's TCP connections to the mirror: a fetch that has returned holds none."""
        port = int(self.url.rsplit(":", 1)[1])
        return [c.status for c in psutil.Process().net_connections("tcp") if c.raddr and c.raddr.port == port]


def mirror_files() -> dict[str, bytes]:
    """A small checkpoint: a config, a plain git file, an LFS file, and a git file in a folder."""
    draw = random.Random(51)
    return {
        "config.json": json.dumps({"architectures": ["TinyLlm"], "hidden_size": 64}).encode(),
        "model.safetensors": draw.randbytes(3 << 20),
        "tokenizer/vocab.txt": draw.randbytes(1 << 20),
        "extra.bin": draw.randbytes(3 << 19),
    }


def build_mirror(root: Path) -> Mirror:
    """Both revisions in the hub's layout under `root/main`, and the tampered copy under `root/other`."""
    files = mirror_files()
    _write_revision(root / "main", REVISION, files)
    _write_revision(root / "main", OLD_REVISION, {**files, "config.json": OLD_CONFIG})
    tampered = {
        **files,
        "model.safetensors": files["model.safetensors"][::-1],
        "tokenizer/vocab.txt": bytes(b ^ 1 for b in files["tokenizer/vocab.txt"]),
    }
    _write_revision(root / "other", REVISION, tampered, listed=files)
    tree = hub_tree(files)
    (root / "main" / "pages").mkdir()
    (root / "main" / "pages" / "1.json").write_text(json.dumps(tree[:2]))
    (root / "main" / "pages" / "2.json").write_text(json.dumps(tree[2:]))
    return Mirror(root / "main", root / "other", files)


def _write_revision(root: Path, revision: str, files: dict[str, bytes], listed: dict[str, bytes] | None = None) -> None:
    publish(root, CHECKPOINT, revision, files, listed)


def publish(
    root: Path, checkpoint: str, revision: str, files: dict[str, bytes], listed: dict[str, bytes] | None = None
) -> None:
    """`checkpoint@revision`'s files and the tree JSON the hub would serve for them under the mirror `root`
    (`listed`: the files the listing describes, where they differ)."""
    folder = root / checkpoint / "resolve" / revision
    for path, data in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)
    tree = root / "api" / "models" / checkpoint / "tree" / revision
    tree.parent.mkdir(parents=True, exist_ok=True)
    tree.write_text(json.dumps(hub_tree(listed or files)))


def hub_tree(files: dict[str, bytes]) -> list[dict[str, Any]]:
    """The hub's tree API answer: folders, plain git files (git blob oid) and LFS files (sha256 in `lfs.oid`)."""
    entries: list[dict[str, Any]] = [{"type": "directory", "oid": "0" * 40, "size": 0, "path": "tokenizer"}]
    for path, data in sorted(files.items()):
        entry: dict[str, Any] = {
            "type": "file",
            "size": len(data),
            "path": path,
            "oid": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest(),
        }
        if path in LFS:
            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        entries.append(entry)
    return entries


_CONFIG = """
worker_processes 1;
user root;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 64; }}
http {{
    default_type application/octet-stream;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    log_format requests escape=json '{{"method":"$request_method","uri":"$uri","status":$status,'
                                    '"range":"$http_range","auth":"$http_authorization","sent":$body_bytes_sent}}';
    server {{
        listen 127.0.0.1:{port};
        access_log {log} requests;
        root {main};
        location /slow/ {{ alias {main}/; limit_rate 2m; }}
        location /norange/ {{ alias {main}/; max_ranges 0; }}
        location /other/ {{ alias {other}/; }}
        location /paged/ {{ alias {main}/; }}
        location = /paged/api/models/{checkpoint}/tree/{revision} {{
            alias {main}/pages/1.json;
            add_header Link '</paged/pages/2.json>; rel="next"';
        }}
        location = /hostile/api/models/{checkpoint}/tree/{revision} {{
            alias {main}/pages/1.json;
            add_header Link '<http://elsewhere.example/tree>; rel="next"';
        }}
        location /reset/ {{ return 444; }}
        location /error/ {{ return 500; }}
    }}
}}
"""


@contextmanager
def running_nginx(prefix: Path, mirror: Mirror, port: int) -> Iterator[Nginx]:
    """nginx serving `mirror` on `port` until the block ends."""
    if not Path(NGINX).is_file():
        raise RuntimeError("nginx is missing: `make nginx` installs Debian's nginx package")
    prefix.mkdir(parents=True, exist_ok=True)
    log = prefix / "access.log"
    config = prefix / "nginx.conf"
    config.write_text(
        _CONFIG.format(
            prefix=prefix,
            port=port,
            log=log,
            main=mirror.root,
            other=mirror.other,
            checkpoint=CHECKPOINT,
            revision=REVISION,
        )
    )
    server = subprocess.Popen(
        [NGINX, "-c", str(config), "-p", str(prefix), "-g", "daemon off;"], stderr=subprocess.DEVNULL
    )
    try:
        _wait_listening(port, server, prefix / "error.log")
        yield Nginx(f"http://127.0.0.1:{port}", log)
    finally:
        server.terminate()
        server.wait(10)


def _wait_listening(port: int, server: subprocess.Popen[bytes], error_log: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"nginx exited: {error_log.read_text() if error_log.exists() else 'no error log'}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise RuntimeError(f"nginx did not listen on {port} within 10 s")


@contextmanager
def stalled_listener() -> Iterator[tuple[str, list[socket.socket]]]:
    """A base URL whose server accepts connections and never answers; the connections it accepted."""
    accepted: list[socket.socket] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.1)
        done = threading.Event()

        def accept() -> None:
            while not done.is_set():
                try:
                    accepted.append(server.accept()[0])
                except TimeoutError:
                    continue

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.getsockname()[1]}", accepted
        finally:
            done.set()
            thread.join()
            for connection in accepted:
                connection.close()


def child_fetch(base: str, store: Path, lock: Path) -> subprocess.Popen[bytes]:
    """This module as a fetch in a child process."""
    return subprocess.Popen([sys.executable, __file__, base, str(store), str(lock)])


def lock_for(files: dict[str, bytes], revision: str = REVISION) -> Lock:
    """The lock a first fetch of `files` records."""
    locked = tuple(LockedFile(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in sorted(files.items()))
    return Lock(CHECKPOINT, revision, datetime.now(UTC), "testkit/weights_mirror.py", locked)


if __name__ == "__main__":
    base, store, lock = sys.argv[1:]
    locked = read_lock(Path(lock))
    fetch(HttpSource(base), locked.checkpoint, locked.revision, Path(store), locked, jobs=2)
