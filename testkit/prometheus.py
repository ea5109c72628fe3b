"""A real Prometheus (Debian's package, `make prometheus`) on a free loopback port, and its instant queries."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from .helpers import free_port, stop_process


@contextmanager
def running_prometheus(config: Path, data: Path, log: Path | None = None) -> Iterator[int]:
    """Prometheus with `config`, its TSDB in `data`, its output in `log` (else dropped); its port."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing: `make prometheus` installs Debian's prometheus package"
    port = free_port()
    with open(log or "/dev/null", "wb") as output:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield port
        finally:
            stop_process(proc, timeout=20)


async def query_until(port: int, expr: str, least: int, timeout: float = 20.0) -> list[dict[str, Any]]:
    """The instant query's results once it has at least `least` of them (a starting Prometheus answers 503)."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=2.0) as http:
        while time.monotonic() < deadline:
            try:
                reply = await http.get(f"http://127.0.0.1:{port}/api/v1/query", params={"query": expr})
                results: list[dict[str, Any]] = reply.json()["data"]["result"]
                if len(results) >= least:
                    return results
            except (httpx.HTTPError, KeyError, ValueError):
                pass
            await asyncio.sleep(0.2)
    raise AssertionError(f"prometheus never had {least} results for {expr}")
