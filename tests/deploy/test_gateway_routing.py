"""The real gateway (HAProxy) routes by the body's model, lists the site's models, and refuses bad input with an
OpenAI-shaped 4xx while it keeps serving: two real appliances on fake engines, each serving a model of its own."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from testkit.gateway_site import Engine, running_gateway, running_site

ENGINES = (Engine("a", "tiny-a"), Engine("b", "org/tiny-b"))
BODY_KIB = 16
HEADERS_WITHIN_S = 0.5


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("routing")
    overrides = (f"gateway.max_body_kib={BODY_KIB}", f"gateway.request_timeout_s={HEADERS_WITHIN_S}")
    with (
        running_site(ENGINES, folder) as site,
        running_gateway(site, folder / "gw", *overrides, models=[e.model for e in ENGINES]) as url,
    ):
        yield url


def openai_error(reply: httpx.Response) -> dict[str, object]:
    """The error object of an OpenAI-shaped refusal (asserting the shape)."""
    assert reply.headers["content-type"] == "application/json"
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return dict(error)


def still_serving(url: str) -> None:
    reply = httpx.post(f"{url}/v1/completions", json={"model": "tiny-a", "prompt": "x"}, timeout=10)
    assert reply.status_code == 200 and reply.json()["model"] == "tiny-a"


@pytest.mark.parametrize("model", [e.model for e in ENGINES])
def test_a_request_reaches_an_appliance_serving_its_model(gateway: str, model: str) -> None:
    for _ in range(3):
        reply = httpx.post(f"{gateway}/v1/chat/completions", json={"model": model, "messages": []}, timeout=10)
        assert reply.status_code == 200 and reply.json()["model"] == model


def test_the_gateway_lists_every_model_of_the_site(gateway: str) -> None:
    reply = httpx.get(f"{gateway}/v1/models", timeout=10)
    assert reply.status_code == 200
    assert reply.json()["object"] == "list"
    assert [m["id"] for m in reply.json()["data"]] == ["tiny-a", "org/tiny-b"]


def test_a_model_no_appliance_serves_gets_404_naming_it(gateway: str) -> None:
    reply = httpx.post(f"{gateway}/v1/completions", json={"model": 'gpt-"5"', "prompt": "x"}, timeout=10)
    assert reply.status_code == 404
    error = openai_error(reply)
    assert error["param"] == "model" and error["code"] == "model_not_found"
    assert 'gpt-"5"' in str(error["message"])  # escaped into the JSON, not breaking it
    still_serving(gateway)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"this is not json", 400, "invalid_json"),
        (b"", 400, "invalid_json"),
        (b'["model", "tiny-a"]', 400, "invalid_json"),
        (b'{"prompt": "x"}', 400, "missing_model"),
        (b'{"model": "tiny-a", "prompt": "' + b"x" * (BODY_KIB * 1024) + b'"}', 413, "request_too_large"),
    ],
    ids=["text", "empty", "array", "no-model", "oversize"],
)
def test_a_bad_body_is_refused_with_an_openai_error(gateway: str, body: bytes, status: int, code: str) -> None:
    reply = httpx.post(
        f"{gateway}/v1/completions", content=body, headers={"content-type": "application/json"}, timeout=10
    )
    assert reply.status_code == status
    assert openai_error(reply)["code"] == code
    still_serving(gateway)


def test_a_route_the_gateway_does_not_serve_gets_404(gateway: str) -> None:
    reply = httpx.get(f"{gateway}/admin", timeout=10)
    assert reply.status_code == 404 and openai_error(reply)["code"] == "unknown_route"


@pytest.mark.parametrize(
    ("sent", "shaped"),
    [
        # Headers never finished: HAProxy's multiplexer answers before any rule or errorfile applies (manual 4.2
        # "http-after-response", its note on early errors), so the 408 is its own page, not the OpenAI shape.
        (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n", False),
        (b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"model"', True),
    ],
    ids=["headers", "body"],
)
def test_a_slowloris_client_gets_408_and_the_gateway_keeps_serving(gateway: str, sent: bytes, shaped: bool) -> None:
    host, port = gateway.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        started = time.monotonic()
        sock.sendall(sent)  # and then nothing more
        still_serving(gateway)  # others are served meanwhile
        answer = sock.recv(4096)
        waited = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert (b'"code": "request_timeout"' in answer) is shaped
    assert HEADERS_WITHIN_S <= waited < HEADERS_WITHIN_S + 2
    still_serving(gateway)


def test_the_rendered_config_is_the_one_serving(gateway: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    config = Path(tmp_path_factory.getbasetemp()) / "routing0" / "gw" / "haproxy.cfg"
    text = config.read_text()
    assert "option http-buffer-request" in text
    assert "req.body,json_query('$.model')" in text
