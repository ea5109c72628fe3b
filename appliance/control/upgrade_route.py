"""POST /upgrade and what /state says of generations: the control API's side of an in-place upgrade.

The body is `{"overrides": [...], "against": "vllm=X" or null, "gates": {...}, "check": false}`: the new
generation's full override list, its plugin state (null: the pinned one) and the gate settings
(`appliance.rollout.gates.GateSettings` fields). The appliance judges it with its own files and environment, as
its `serve` would. A refusal is 400 with its one-line reason (409 while another upgrade runs; 503 when the
judge cannot give a verdict, e.g. the engine's config probe ran past its bound); 202 with the upgrade started;
200 with the record when only checked, or when the overrides give the generation already serving (its old and
new are then one).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import replace

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from appliance.control.documents import StateDocument, render
from appliance.control.sources import Upgrades
from appliance.errors import ApplianceError, ConfigError

__all__ = ["upgrade_handler", "with_generations"]

Handler = Callable[[Request], Awaitable[Response]]


def with_generations(document: StateDocument, upgrades: Upgrades | None) -> StateDocument:
    if upgrades is None:
        return document
    current, previous, last = upgrades.generations()
    return replace(document, generation=current, previous_generation=previous, upgrade=last, site_dir=upgrades.site_dir)


def upgrade_handler(upgrades: Upgrades | None) -> Handler:
    async def upgrade(request: Request) -> Response:
        if upgrades is None:
            return _error("this appliance keeps no generations (slots are upgraded by their own serve)", 404)
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _error("the body is not JSON", 400)
        overrides, gates = body.get("overrides") if isinstance(body, dict) else None, body.get("gates", {})
        if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
            return _error("overrides must be a list of strings", 400)
        against = body.get("against")
        if not isinstance(gates, dict) or not isinstance(against, str | None):
            return _error("gates must be an object and against a string or null", 400)
        try:
            record = await upgrades.start(tuple(overrides), against, gates, body.get("check") is True)
        except ConfigError as error:
            status = 409 if error.problems[0].code == "upgrade-running" else 400
            return _error("; ".join(p.render() for p in error.problems), status)
        except ApplianceError as error:  # no verdict (the probe hung or crashed): nothing changed, try again later
            return _error(f"cannot judge the new generation: {error}", 503)
        started = body.get("check") is not True and record.old.id != record.new.id
        return Response(render(record), status_code=202 if started else 200, media_type="application/json")

    return upgrade


def _error(message: str, status: int) -> Response:
    return JSONResponse({"error": message}, status_code=status)
