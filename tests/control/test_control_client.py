"""The one control-plane contract: documents served by the real API and parsed by the one client,
over real HTTP, and the client's one-line errors.

The API is the real create_app fed with the recorded appliance's captures (testkit/recorded_appliance.py),
so what it serves can be compared with what was recorded.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from appliance.cli.main import main
from appliance.control.api import checks_document
from appliance.control.client import ApiError, ControlClient, SyncControlClient, Target
from appliance.control.documents import (
    LatencyDocument,
    LoadDocument,
    SchedulerDocument,
    StateDocument,
    StepsDocument,
    SummaryDocument,
    dump,
    parse,
    render,
)
from appliance.preflight.results import check
from testkit.helpers import free_port
from testkit.recorded_appliance import (
    HOST,
    STATE,
    RecordedApi,
    not_an_appliance,
    recorded_api,
    recorded_appliance,
    serving_here,
)

TOKEN = "client-test-token"
CHECKS = (
    check("kmd", "KMD version", "pass", "2.4.1 meets the row's 2.1.0", kmd="2.4.1"),
    check("hugepages", "1G hugepages", "fail", "0 of 4 reserved", "Reserve 1G hugepages", blocking=True),
)


def recorded_keys(state: StateDocument) -> dict[str, object]:
    """The document's keys that the capture has (keys added since have their defaults in a recorded state)."""
    return {k: v for k, v in dump(state).items() if k in STATE}


@pytest.fixture
def api() -> Iterator[RecordedApi]:
    with recorded_api(TOKEN, CHECKS) as recorded:
        yield recorded


@pytest.fixture
async def client(api: RecordedApi) -> AsyncIterator[ControlClient]:
    async with serving_here(api.app) as url, ControlClient([Target("rec", url, TOKEN)]) as c:
        yield c


async def test_the_state_served_is_the_state_recorded_key_for_key(client: ControlClient) -> None:
    state = await client.state("rec")
    # recorded /state -> supervisor snapshot and plan -> document -> JSON -> parse: every recorded key, as recorded
    assert recorded_keys(state) == STATE
    assert state.events[-1].previous == "warming" and state.plan.secret_env == {"HF_TOKEN": "HF_TOKEN"}


async def test_host_and_checks_are_typed_as_served(client: ControlClient) -> None:
    host = await client.host("rec")
    assert host is not None and dump(host.usage) == HOST["usage"] and host.devices.boards == ()
    assert await client.checks("rec") == checks_document(CHECKS)


async def test_checks_are_none_where_the_appliance_ran_none() -> None:
    with recorded_api(TOKEN) as recorded:
        async with serving_here(recorded.app) as url, ControlClient([Target("rec", url, TOKEN)]) as client:
            assert await client.checks("rec") is None


async def test_an_action_answers_the_state_it_was_accepted_in(client: ControlClient, api: RecordedApi) -> None:
    assert await client.act("rec", "drain") == "ready"
    assert api.supervisor.actions == ["drain"]


def test_the_sync_client_reads_the_same_documents_over_real_http() -> None:
    with recorded_appliance(TOKEN) as rec, SyncControlClient(Target("rec", rec.url, TOKEN)) as sync:
        assert recorded_keys(sync.state()) == STATE
        assert sync.load().scheduler.steps > 0
        assert "vllm:num_requests_running" in sync.engine_metrics()
        assert sync.checks() is None and sync.act("restart") == "ready" and rec.actions == ["restart"]


def test_a_newer_appliances_unknown_keys_are_ignored() -> None:
    newer = STATE | {"gpu_temperature": 71, "events": [e | {"source": "supervisor"} for e in STATE["events"]]}
    newer["plan"] = STATE["plan"] | {"cwd": "/var/lib/appliance"}
    assert recorded_keys(parse(StateDocument, json.dumps(newer))) == STATE


def test_an_infinite_bucket_bound_crosses_the_wire_as_standard_json() -> None:
    steps = StepsDocument(10, 12.5, 8, 32, ((16.0, 7.0), (float("inf"), 3.0)), 0.25)
    latency = LatencyDocument(0.02, 0.05, 0.08, 24)
    summary = SummaryDocument(
        5.0,
        1,
        3,
        0,
        0.01,
        2097152,
        40.0,
        120.0,
        (35.0, 40.0),
        (110.0, 120.0),
        0.5,
        0,
        None,
        latency,
        latency,
        latency,
        steps,
        False,
        (),
    )
    load = LoadDocument(summary, None, SchedulerDocument(None, 0, 0, 0.0, 0.0, None, None), ("3 queued",))
    body = render(load)
    assert json.loads(body)["summary"]["steps"]["distribution"][1] == ["Infinity", 3.0]  # no bare Infinity
    assert parse(LoadDocument, body) == load


def test_the_bearer_header_is_sent_only_with_a_token() -> None:
    seen: list[str | None] = []

    def engine(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(200, text="page")

    for token in ("secret", ""):
        with SyncControlClient(Target("t", "http://t", token), transport=httpx.MockTransport(engine)) as sync:
            sync.engine_metrics()
    assert seen == ["Bearer secret", None]


async def reason_of(client: ControlClient, name: str, call: str) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await (client.act(name, "drain") if call == "drain" else getattr(client, call)(name))
    message = str(caught.value)
    assert message.splitlines() == [message] and message.startswith(f"{name}: ")
    return caught.value


async def test_each_failure_is_one_line_naming_the_appliance_and_the_reason(api: RecordedApi) -> None:
    gone = Target("gone", f"http://127.0.0.1:{free_port()}", TOKEN)
    with not_an_appliance() as odd:
        async with (
            serving_here(api.app) as url,
            ControlClient([Target("wrong", url, "not-the-token")]) as wrong,
            ControlClient([Target("odd", odd, TOKEN)]) as strange,
            ControlClient([gone]) as unreachable,
        ):
            await each_failure_is_one_line(wrong, strange, unreachable)


async def each_failure_is_one_line(wrong: ControlClient, strange: ControlClient, unreachable: ControlClient) -> None:
    refused = await reason_of(wrong, "wrong", "state")
    assert refused.reason == "401: wrong or missing control token (set its token_env or --token-file)"
    assert refused.status == 401
    assert (await reason_of(wrong, "wrong", "drain")).reason.startswith("drain refused, 401: wrong or missing")
    assert (await reason_of(strange, "odd", "state")).reason.startswith("unexpected answer: ")
    assert (await reason_of(strange, "odd", "load")).reason == "/load answered 500 boom"
    lost = await reason_of(unreachable, "gone", "state")
    assert lost.reason.startswith("unreachable: ClientConnectorError Cannot connect") and lost.status is None
    assert (await reason_of(unreachable, "gone", "drain")).reason.startswith("drain not sent, ClientConnectorError")


def test_status_reports_an_unreachable_appliance_in_one_line_and_exits_4(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["status", "--url", url]) == 4
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and err.startswith(f"error: {url}: unreachable: ConnectError")
