"""The gateway's one frontend: what it answers itself, what it refuses, and which model backend gets the rest.

Rules run in order (configuration manual 4.2, `http-request`), each refusal an `http-request return` in the OpenAI
error shape, so every bad request is answered at once and the gateway keeps serving:

1. clients (when the site lists keys): 401 without a listed key, 429 past the key's rate or concurrency;
2. `GET /v1/models`: the site's models, rendered at start; any other route than `POST /v1/...`: 404;
3. the body, read whole (`option http-buffer-request`): 413 above gateway.max_body_kib, 400 when it is not a JSON
   object, 400 without a `model` (read with `req.body,json_query('$.model')`, manual 7.3.1), 404 for a model no
   appliance serves;
4. the priority class: the client's, else the header's, else the default; 400 for one the site does not list;
5. per model: 503 when none of its engines is ready; then `use_backend` by model. The model's backend sheds a
   sheddable class (429 at once while the model has requests queued): gateway.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from appliance.config.schema import GatewayConfig
from appliance.deploy.gateway_admission import ModelRoute
from appliance.deploy.gateway_answers import Answer, return_line
from appliance.deploy.gateway_classes import request_log
from appliance.deploy.gateway_clients import ClientKey, client_classes, client_rules

__all__ = ["MODELS_FILE", "frontend", "models_document"]

MODELS_FILE = "models.json"
# A JSON object, possibly spread over lines: single-quoted so HAProxy keeps the backslashes (manual 2.2).
_JSON_OBJECT = r"'(?s)^\s*\{.*\}\s*$'"


def models_document(routes: tuple[ModelRoute, ...]) -> str:
    """The site's `GET /v1/models` answer, in the OpenAI list shape."""
    created = int(time.time())
    data = [{"id": r.model, "object": "model", "created": created, "owned_by": "appliance"} for r in routes]
    return json.dumps({"object": "list", "data": data})


def frontend(
    listen: str, folder: Path, routes: tuple[ModelRoute, ...], gateway: GatewayConfig, clients: tuple[ClientKey, ...]
) -> list[str]:
    """The frontend section."""
    return [
        "frontend openai",
        f"    bind {listen}",
        *request_log(folder),
        "    option http-buffer-request",
        f"    errorfile 400 {folder / '400.http'}",
        f"    errorfile 408 {folder / '408.http'}",
        *client_rules(clients, folder),
        *_routes_answered_here(folder),
        *_body_checks(routes, gateway),
        *_priority(gateway, clients),
        *(_admission(r) for r in routes),
        *(f"    use_backend {r.backend} if {{ var(txn.model) -m str {r.model} }}" for r in routes),
    ]


def _routes_answered_here(folder: Path) -> list[str]:
    unknown = Answer(404, "unknown route: the gateway serves POST /v1/... and GET /v1/models", code="unknown_route")
    return [
        f"    http-request return status 200 content-type application/json file {folder / MODELS_FILE} "
        "if METH_GET { path /v1/models }",
        return_line(unknown, "unless METH_POST { path_beg /v1/ }"),
    ]


def _body_checks(routes: tuple[ModelRoute, ...], gateway: GatewayConfig) -> list[str]:
    limit = gateway.max_body_kib * 1024
    too_large = Answer(413, f"the request body is larger than {gateway.max_body_kib} KiB", code="request_too_large")
    not_json = Answer(400, "the request body is not a JSON object", code="invalid_json")
    no_model = Answer(400, "the request names no model", param="model", code="missing_model")
    unknown = Answer(404, "the model {model} does not exist on this site", param="model", code="model_not_found")
    served = " ".join(r.model for r in routes)
    return [
        # body_size is the announced length (manual 7.3.6): a body larger than the buffer is refused whole.
        return_line(too_large, f"if {{ req.body_size gt {limit} }} || {{ req.body_len gt {limit} }}"),
        return_line(not_json, f"unless {{ req.body -m reg {_JSON_OBJECT} }}"),
        "    http-request set-var(txn.model) req.body,json_query('$.model')",
        return_line(no_model, "unless { var(txn.model) -m found }"),
        return_line(unknown, f"unless {{ var(txn.model) -m str {served} }}", model_in_message=True),
    ]


def _priority(gateway: GatewayConfig, clients: tuple[ClientKey, ...]) -> list[str]:
    header = gateway.priority_header
    listed = " ".join(gateway.classes)
    refused = Answer(400, f"{header} must name one of: {', '.join(gateway.classes)}", param=header, code="bad_priority")
    return [
        f"    http-request set-var(txn.class) str({gateway.default_class})",
        f"    http-request set-var(txn.class) req.hdr({header}) if {{ req.hdr({header}) -m found }}",
        *client_classes(clients),
        return_line(refused, f"unless {{ var(txn.class) -m str {listed} }}"),
        # Lower classes are dequeued first (manual 4.2 "http-request set-priority-class"): the listed order.
        *(
            f"    http-request set-priority-class int({rank}) if {{ var(txn.class) -m str {name} }}"
            for rank, name in enumerate(gateway.classes)
        ),
    ]


def _admission(route: ModelRoute) -> str:
    down = Answer(503, f"no appliance serving {route.model} is ready", "service_unavailable", code="no_ready_server")
    return return_line(down, f"if {{ var(txn.model) -m str {route.model} }} {{ nbsrv({route.backend}) eq 0 }}")
