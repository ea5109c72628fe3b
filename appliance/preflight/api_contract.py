"""The client contract: the engine endpoints and request fields a fleet's clients rely on.

A contract is recorded from a running engine's `/openapi.json` and kept under build/; a later
engine (a new vLLM, or the TT plugin's build of it) is diffed against it before clients see it.
Fields are compared one level deep, nested schemas by name: what a client sends is a request
body's top-level fields, and a renamed nested schema shows up as a changed field type. Chat messages are the
exception: the content parts a client puts in them (text, and the images a vision appliance takes as base64
`data:` URLs) are recorded by their `type`, with their fields and the fields of the object each one nests
(`image_url.url`), since a part the engine stops accepting breaks clients as surely as a removed field.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic_core import to_jsonable_python

from appliance.errors import ConfigError, EngineError, Problem
from appliance.resources import build_dir

__all__ = [
    "CLIENT_CONTENT_PARTS",
    "CLIENT_ENDPOINTS",
    "CONTRACT_FILE",
    "ApiContract",
    "ContractDiff",
    "Endpoint",
    "FieldSpec",
    "contract_from_openapi",
    "contract_json",
    "diff_contract",
    "fetch_openapi",
    "load_contract",
    "record_contract",
]

CONTRACT_FILE = build_dir() / "openapi-contract.json"
# What the appliance's own clients call: the OpenAI SDK, the load tester (server-side
# tokenization), the console and the fleet's probes.
CLIENT_ENDPOINTS = (
    "GET /health",
    "GET /version",
    "GET /metrics",
    "GET /v1/models",
    "POST /v1/completions",
    "POST /v1/chat/completions",
    "POST /tokenize",
    "POST /detokenize",
)
# The chat content parts they send: text, and images (the load test's vision workload, the OpenAI SDK).
CLIENT_CONTENT_PARTS = ("text", "image_url")
_FORBID = ConfigDict(extra="forbid")


@dataclasses.dataclass(frozen=True, slots=True)
class FieldSpec:
    __pydantic_config__ = _FORBID

    type: tuple[str, ...]
    """Union members, sorted: `string`, `null`, `array<integer>`, or a schema name."""
    required: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Endpoint:
    __pydantic_config__ = _FORBID

    request: tuple[str, ...]
    """Request body schema names (several when the body is a union); empty without a body."""
    fields: Mapping[str, FieldSpec]


@dataclasses.dataclass(frozen=True, slots=True)
class ApiContract:
    __pydantic_config__ = _FORBID

    source: str
    """What the contract was recorded from."""
    endpoints: Mapping[str, Endpoint]
    """"METHOD /path" -> its request fields."""
    other_endpoints: tuple[str, ...] = ()
    """Endpoints the engine served outside the contract when it was recorded."""
    content_parts: Mapping[str, Mapping[str, FieldSpec]] = dataclasses.field(default_factory=dict)
    """A chat content part's `type` -> its fields, a nested object's as `image_url.url`."""


@dataclasses.dataclass(frozen=True, slots=True)
class ContractDiff:
    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]

    @property
    def breaking(self) -> bool:
        """Removed or changed endpoints and fields break clients; additions do not."""
        return bool(self.removed or self.changed)


_ADAPTER: TypeAdapter[ApiContract] = TypeAdapter(ApiContract)


def fetch_openapi(base_url: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """GET <base_url>/openapi.json; EngineError when no engine answers with a schema."""
    try:
        reply = httpx.get(f"{base_url}/openapi.json", timeout=timeout_s)
        reply.raise_for_status()
        document: dict[str, Any] = reply.json()
    except (httpx.HTTPError, ValueError) as err:
        raise EngineError(f"no OpenAPI schema from {base_url}/openapi.json: {err}") from None
    return document


def record_contract(base_url: str, timeout_s: float = 10.0) -> ApiContract:
    """The client contract a running engine serves, labelled with its vLLM version and the date."""
    document = fetch_openapi(base_url, timeout_s)
    try:
        version = httpx.get(f"{base_url}/version", timeout=timeout_s).json().get("version", "?")
    except (httpx.HTTPError, ValueError, AttributeError):
        version = "?"
    return contract_from_openapi(document, f"vLLM {version} at {base_url}, recorded {dt.date.today()}")


def contract_from_openapi(
    document: Mapping[str, Any], source: str, endpoints: tuple[str, ...] = CLIENT_ENDPOINTS
) -> ApiContract:
    """The contract of `endpoints` in an OpenAPI document (endpoints it lacks are left out)."""
    served = dict(_operations(document))
    schemas = document.get("components", {}).get("schemas", {})
    parts = dict(_content_parts(schemas))
    return ApiContract(
        source=source,
        endpoints={key: _endpoint(served[key], schemas) for key in endpoints if key in served},
        other_endpoints=tuple(sorted(k for k in served if k not in endpoints)),
        content_parts={kind: parts[kind] for kind in CLIENT_CONTENT_PARTS if kind in parts},
    )


def diff_contract(recorded: ApiContract, live: ApiContract) -> ContractDiff:
    """What changed from the recorded contract to a live engine's."""
    added = [f"{key} (endpoint)" for key in live.other_endpoints if key not in recorded.other_endpoints]
    removed: list[str] = []
    changed: list[str] = []
    for key, then in recorded.endpoints.items():
        now = live.endpoints.get(key)
        if now is None:
            removed.append(f"{key} (endpoint)")
        else:
            _diff_fields(key, then.fields, now.fields, added, removed, changed)
    for kind, fields in recorded.content_parts.items():
        where = f"chat content part `{kind}`"
        if kind not in live.content_parts:
            removed.append(where)
        else:
            _diff_fields(where, fields, live.content_parts[kind], added, removed, changed)
    added += [f"chat content part `{kind}`" for kind in live.content_parts if kind not in recorded.content_parts]
    return ContractDiff(tuple(added), tuple(removed), tuple(changed))


def _diff_fields(
    where: str,
    then: Mapping[str, FieldSpec],
    now: Mapping[str, FieldSpec],
    added: list[str],
    removed: list[str],
    changed: list[str],
) -> None:
    """One endpoint's or content part's fields, recorded against live, into the three lists."""
    for name, old in then.items():
        new = now.get(name)
        at = f"{where} field `{name}`"
        if new is None:
            removed.append(at)
        elif not set(old.type) <= set(new.type):
            changed.append(f"{at}: {'|'.join(old.type)} -> {'|'.join(new.type)}")
        elif new.required and not old.required:
            changed.append(f"{at}: now required")
        elif new.type != old.type:
            added.append(f"{at}: also accepts {'|'.join(sorted(set(new.type) - set(old.type)))}")
    added += [f"{where} field `{n}`" for n in now if n not in then]


def load_contract(path: Path = CONTRACT_FILE) -> ApiContract:
    """Read a recorded contract; ConfigError naming the file when it is missing or malformed."""
    try:
        return _ADAPTER.validate_json(path.read_text())
    except FileNotFoundError:
        raise ConfigError(
            (Problem(code="contract-missing", key=str(path), message="no client contract recorded"),)
        ) from None
    except ValidationError as err:
        raise ConfigError(
            (Problem(code="contract-invalid", key=str(path), message=" ".join(str(err).split())),)
        ) from None


def contract_json(contract: ApiContract) -> dict[str, Any]:
    data: dict[str, Any] = to_jsonable_python(contract, fallback=dict)
    return data


def _operations(document: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for path, methods in document.get("paths", {}).items():
        for method, operation in methods.items():
            yield f"{method.upper()} {path}", operation


def _content_parts(schemas: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, FieldSpec]]]:
    """Each chat content part schema (`ChatCompletionContentPart*`), keyed by its `type` constant."""
    for name, schema in schemas.items():
        kind = schema.get("properties", {}).get("type", {}).get("const")
        if name.startswith("ChatCompletionContentPart") and isinstance(kind, str):
            yield kind, _fields(schema, schemas)


def _fields(schema: Mapping[str, Any], schemas: Mapping[str, Any]) -> dict[str, FieldSpec]:
    """A part's fields, and one level into each object it nests by reference (`image_url.url`)."""
    required = set(schema.get("required", ()))
    found: dict[str, FieldSpec] = {}
    for name, spec in schema.get("properties", {}).items():
        found[name] = FieldSpec(tuple(sorted(_type(spec))), name in required)
        nested = schemas.get(str(spec.get("$ref", "")).rsplit("/", 1)[-1], {})
        inner = set(nested.get("required", ()))
        for sub, sub_spec in nested.get("properties", {}).items():
            found[f"{name}.{sub}"] = FieldSpec(tuple(sorted(_type(sub_spec))), sub in inner)
    return found


def _endpoint(operation: Mapping[str, Any], schemas: Mapping[str, Any]) -> Endpoint:
    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if body is None:
        return Endpoint(request=(), fields={})
    variants = body.get("anyOf") or body.get("oneOf") or [body]
    names = tuple(v["$ref"].rsplit("/", 1)[-1] for v in variants if "$ref" in v)
    bodies = [schemas.get(name, {}) for name in names]
    types: dict[str, set[str]] = {}
    for body_schema in bodies:
        for field, spec in body_schema.get("properties", {}).items():
            types.setdefault(field, set()).update(_type(spec))
    # A field is required only when every body variant requires it.
    fields = {
        field: FieldSpec(tuple(sorted(kinds)), all(field in b.get("required", ()) for b in bodies))
        for field, kinds in types.items()
    }
    return Endpoint(request=names, fields=fields)


def _type(schema: Mapping[str, Any]) -> list[str]:
    if "$ref" in schema:
        return [str(schema["$ref"]).rsplit("/", 1)[-1]]
    variants = schema.get("anyOf") or schema.get("oneOf") or schema.get("allOf")
    if variants:
        return sorted({member for variant in variants for member in _type(variant)})
    kind = schema.get("type")
    if kind == "array":
        return [f"array<{'|'.join(_type(schema.get('items', {})))}>"]
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return [f"object<{'|'.join(_type(schema['additionalProperties']))}>"]
    if isinstance(kind, list):
        return sorted(map(str, kind))
    return [str(kind)] if kind else ["any"]
