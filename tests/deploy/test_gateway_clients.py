"""API keys at the real gateway: read from owner-only files, never shown; a missing or unknown key gets 401, a
client past its rate or concurrency 429 with Retry-After, and a client's own class outranks the header."""

from __future__ import annotations

import asyncio
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from testkit.gateway_site import TOKEN, Engine, gateway_command, running_gateway, running_site
from testkit.helpers import Cli

ENGINE = Engine("a", "tiny-a", max_concurrency=4, delay_s=0.5)
KEYS = {"alice": "sk-alice-0123456789abcdef", "bob": "sk-bob-0123456789abcdef"}


def key_files(folder: Path, mode: int = 0o600) -> list[str]:
    """The clients as overrides, their keys in files of `mode`: alice one request at a time, bob two a second."""
    limits = {"alice": "rate_per_s: 50, max_concurrency: 1, priority: high", "bob": "rate_per_s: 2"}
    overrides = []
    for name, key in KEYS.items():
        path = folder / f"{name}.key"
        path.write_text(key + "\n")
        path.chmod(mode)
        overrides.append(f"gateway.clients.{name}={{key_file: '{path}', {limits[name]}}}")
    return overrides


def auth(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[name]}"}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with running_site([ENGINE], tmp_path_factory.mktemp("clients")) as site:
        yield site


@pytest.fixture(scope="module")
def gateway(site: Path) -> Iterator[str]:
    overrides = key_files(site.parent)
    with running_gateway(site, site.parent / "gw", *overrides, models=[ENGINE.model], headers=auth("alice")) as url:
        yield url


def post(url: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{url}/v1/completions", json={"model": ENGINE.model}, headers=headers, timeout=10)


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer sk-nobody-0123456789"}], ids=["none", "wrong"])
def test_a_request_without_a_listed_key_gets_401(gateway: str, headers: dict[str, str]) -> None:
    reply = post(gateway, headers)
    assert reply.status_code == 401
    assert reply.json()["error"]["code"] == "invalid_api_key"
    assert post(gateway, auth("alice")).status_code == 200


def test_a_client_past_its_rate_gets_429_with_retry_after(gateway: str) -> None:
    replies = [httpx.get(f"{gateway}/v1/models", headers=auth("bob"), timeout=10) for _ in range(4)]
    assert [r.status_code for r in replies] == [200, 200, 429, 429]
    assert replies[-1].headers["retry-after"] == "1"
    assert replies[-1].json()["error"]["type"] == "rate_limit_error"


async def test_a_client_past_its_concurrency_gets_429_and_another_client_is_served(gateway: str) -> None:
    async with httpx.AsyncClient(base_url=gateway, timeout=10) as http:
        body = {"model": ENGINE.model}
        first, second = await asyncio.gather(
            http.post("/v1/completions", json=body, headers=auth("alice")),
            http.post("/v1/completions", json=body, headers=auth("alice") | {"X-Priority": "low"}),
        )
    assert sorted([first.status_code, second.status_code]) == [200, 429]
    assert "concurrent" in (first if first.status_code == 429 else second).json()["error"]["message"]


def test_no_key_is_written_but_into_its_owner_only_map(gateway: str, site: Path) -> None:
    folder = site.parent / "gw"
    keys_map = folder / "keys.map"
    assert stat.S_IMODE(keys_map.stat().st_mode) == 0o600
    assert all(key in keys_map.read_text() for key in KEYS.values())
    for path in folder.iterdir():
        if path != keys_map and path.is_file():  # not the request log's and counters' sockets
            assert not any(key in path.read_text() for key in KEYS.values()), path


def test_a_key_file_others_can_read_is_refused_naming_it(site: Path, cli: Cli, tmp_path: Path) -> None:
    overrides = key_files(tmp_path, mode=0o644)
    done = cli(*gateway_command(site, "--dry-run", *overrides)[1:], env={"APPLIANCE_TOKEN": TOKEN})
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert " gateway.clients.alice.key_file: " in line and "chmod 600" in line
    assert not any(key in done.stdout + done.stderr for key in KEYS.values())


def test_the_dry_run_names_clients_never_their_keys(site: Path, cli: Cli, tmp_path: Path) -> None:
    done = cli(*gateway_command(site, "--dry-run", *key_files(tmp_path))[1:], env={"APPLIANCE_TOKEN": TOKEN})
    assert done.returncode == 0, done.stderr
    assert "var(txn.client) -m str alice" in done.stdout and "sc_http_req_rate(0)" in done.stdout
    assert not any(key in done.stdout + done.stderr for key in KEYS.values())
