"""Conditional polls and the one-request poll: the API's ETags and 304s, GET /live, the client that keeps
what it was sent, the /load scrape that pollers share, and the console's poller.

The API is the real create_app of the recorded appliance (testkit/recorded_appliance.py), asked
through httpx.ASGITransport and, by the one client, over real HTTP; its recorded /state never
changes and each /load scrapes the next recorded page, so an unchanged and a changed document
can both be asked for. The older appliance is the same app with its ETag headers taken out on the
way, as an appliance from before ETags sent, or with /live answering 404, as one from before /live.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from pathlib import Path

import httpx
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from appliance.control.api import create_app
from appliance.control.client import ControlClient, Target
from appliance.control.documents import (
    ChecksDocument,
    HostDocument,
    LiveDocument,
    LoadDocument,
    StateDocument,
    parse,
)
from appliance.preflight.results import check
from testkit.console_pilot import poll, recorded_console
from testkit.recorded_appliance import (
    PAGES,
    RecordedEngine,
    RecordedSupervisor,
    recorded_api,
    recorded_appliance,
    recorded_sources,
    serving_here,
)
from tui.poll import Poller

TOKEN = "conditional-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CHECKS = (check("kmd", "KMD version", "pass", "2.4.1 meets the row's 2.1.0", kmd="2.4.1"),)


@contextmanager
def http(app: ASGIApp) -> Iterator[httpx.AsyncClient]:
    yield httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://rec", headers=AUTH)


async def test_a_client_holding_the_current_version_gets_304_and_no_body() -> None:
    with recorded_api(TOKEN, CHECKS) as api, http(api.app) as client:
        for path in ("/state", "/checks"):
            first = await client.get(path)
            tag = first.headers["etag"]
            again = await client.get(path, headers={"If-None-Match": tag})
            assert first.status_code == 200 and again.status_code == 304 and again.content == b""
            assert again.headers["etag"] == tag
            assert (await client.get(path, headers={"If-None-Match": '"stale"'})).content == first.content
            assert (await client.get(path)).status_code == 200  # a client that sends none: as before
        await client.aclose()


async def test_a_changed_document_comes_with_its_new_version_whatever_the_client_holds() -> None:
    with recorded_api(TOKEN) as api, http(api.app) as client:
        first = await client.get("/load")
        second = await client.get("/load", headers={"If-None-Match": first.headers["etag"]})
        await client.aclose()
    assert second.status_code == 200 and second.headers["etag"] != first.headers["etag"]
    assert parse(LoadDocument, second.content) != parse(LoadDocument, first.content)


async def test_loads_closer_than_share_s_share_one_scrape_of_the_engine(tmp_path: Path) -> None:
    supervisor, engine = RecordedSupervisor(tmp_path), RecordedEngine(PAGES)
    app = create_app(supervisor, TOKEN, (), replace(recorded_sources(engine), share_s=600.0))
    with http(app) as client:
        first = await client.get("/load")
        again = await client.get("/load", headers={"If-None-Match": first.headers["etag"]})
        await client.aclose()
    supervisor.log.close()
    assert engine.served == 1 and again.status_code == 304


async def test_live_carries_the_documents_of_state_load_host_and_checks_in_one_answer() -> None:
    with recorded_api(TOKEN, CHECKS) as api, http(api.app) as client:
        await client.get("/load")  # the first scrape moves the capabilities /state reports; then they hold
        live = parse(LiveDocument, (await client.get("/live?detail=1")).content)
        state, checks = (await client.get("/state")).content, (await client.get("/checks")).content
        host = (await client.get("/host")).content
        plain = parse(LiveDocument, (await client.get("/live")).content)
        await client.aclose()
    assert live.state == parse(StateDocument, state) and live.checks == parse(ChecksDocument, checks)
    assert live.host == parse(HostDocument, host) and live.load.summary is not None
    assert plain.host is None and plain.checks is None and plain.load != live.load  # the next recorded page


class Answers:
    """The real app, noting each status it answers; `strip_etags` makes it an appliance from before ETags."""

    def __init__(self, app: ASGIApp, *, strip_etags: bool = False) -> None:
        self.app, self.strip = app, strip_etags
        self.statuses: list[tuple[str, int]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def answer(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.statuses.append((scope["path"], message["status"]))
                if self.strip:
                    message["headers"] = [(k, v) for k, v in message["headers"] if k.lower() != b"etag"]
            await send(message)

        await self.app(scope, receive, answer)


@asynccontextmanager
async def client_on(app: ASGIApp) -> AsyncIterator[ControlClient]:
    """The one client on `app`, served over real HTTP."""
    async with serving_here(app) as url, ControlClient([Target("rec", url, TOKEN)]) as client:
        yield client


async def test_the_client_hands_out_the_document_it_kept_when_the_appliance_answers_304() -> None:
    with recorded_api(TOKEN, CHECKS) as api:
        answers = Answers(api.app)
        async with client_on(answers) as client:
            state, checks = await client.state("rec"), await client.checks("rec")
            assert await client.state("rec") is state and await client.checks("rec") is checks
            first, second = await client.load("rec"), await client.load("rec")
    assert isinstance(state, StateDocument) and isinstance(checks, ChecksDocument)
    assert answers.statuses == [
        ("/state", 200),
        ("/checks", 200),
        ("/state", 304),
        ("/checks", 304),
        ("/load", 200),
        ("/load", 200),
    ]
    assert second != first  # the next recorded page: a changed document still arrives


async def test_the_client_reads_an_appliance_that_sends_no_etag_as_before() -> None:
    with recorded_api(TOKEN, CHECKS) as api:
        older = Answers(api.app, strip_etags=True)
        async with client_on(older) as client:
            first, second = await client.state("rec"), await client.state("rec")
    assert older.statuses == [("/state", 200), ("/state", 200)]
    assert first == second and first is not second


async def test_the_console_asks_one_live_document_a_poll_with_host_facts_and_checks_every_third() -> None:
    with recorded_appliance(checks=CHECKS) as rec:
        app = recorded_console(rec)
        async with app.run_test(size=(140, 48)) as pilot:
            await poll(pilot, 6)
            view = app.selected_view()
    assert rec.answers == {("/live", 200): 4, ("/live?detail=1", 200): 3}  # the poll at start, then 6
    assert view is not None and view.polled.checks is not None and view.polled.checks.checks[0].id == "kmd"
    assert view.polled.host is not None and view.polled.load is not None


class WithoutLive:
    """The real app as an appliance from before GET /live: 404 there, every other route as it was."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/live":
            await JSONResponse({"error": "Not Found"}, status_code=404)(scope, receive, send)
        else:
            await self.app(scope, receive, send)


async def test_an_appliance_from_before_live_is_polled_one_document_at_a_time_and_conditionally() -> None:
    with recorded_api(TOKEN, CHECKS) as api:
        older = Answers(WithoutLive(api.app))
        async with client_on(older) as client:
            poller = Poller(client)
            first, second = await poller.poll("rec", detail=True), await poller.poll("rec", detail=True)
    # /state changes once, when the first /load hands the appliance the page it reads capabilities from
    assert older.statuses == [
        ("/live", 404),
        ("/state", 200),
        ("/load", 200),
        ("/host", 200),
        ("/checks", 200),
        ("/state", 200),
        ("/load", 200),
        ("/host", 304),
        ("/checks", 304),
    ]
    assert first.error is None and second.error is None and second.checks is first.checks
    assert second.state is not None and second.load is not None and second.load != first.load
