"""How much of each model a site admits at once, and how long the rest may wait: derived, then checked.

Each engine (an appliance, or one slot of one) is given as many requests as its plan says it runs at once
(`max_concurrency`, vLLM's --max-num-seqs): past that, vLLM would queue them itself, without a bound, while every
admitted prefill stalls the running decodes on Tenstorrent's phase-exclusive scheduler. The excess waits at the
gateway instead, ordered by priority class, for at most the model's wait bound:

    wait_s = ttft_slo_s × queue_share

the share of the time-to-first-token promise spent queued, the rest left for the prefill once admitted. What is not
admitted by then is refused with 429 and `Retry-After: ceil(wait_s)`: by then the queue ahead has turned over once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from appliance.config.schema import GatewayConfig
from appliance.errors import ConfigError, Problem

__all__ = ["MODEL_BACKEND", "ModelRoute", "Served", "model_routes"]

# Model names are written into HAProxy's configuration (ACL patterns, quoted JSON): only what needs no quoting.
_MODEL_NAME = re.compile(r"^[A-Za-z0-9._:/@+-]+$")
MODEL_BACKEND = "model:"
"""Each model's backend is named `model:<served name>`, so that the exporter's `proxy` label says which model it is
(`render prometheus` copies it into a `model` label)."""
# What a proxy name may not hold (configuration manual 4, "Proxies"): such a character becomes `_`.
_NOT_IN_PROXY_NAME = re.compile(r"[^A-Za-z0-9._:-]")


class Served(Protocol):
    """What admission reads of one engine behind the gateway."""

    @property
    def name(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def max_concurrency(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ModelRoute:
    """One served model: the backend its requests go to, each server's limit, and the wait bound."""

    model: str
    backend: str
    servers: tuple[str, ...]
    maxconn: tuple[int, ...]
    """Per server, in the order of `servers`."""
    ttft_slo_s: float
    wait_s: float

    @property
    def wait_ms(self) -> int:
        return max(1, round(self.wait_s * 1000))

    @property
    def retry_after_s(self) -> int:
        return max(1, math.ceil(self.wait_s))

    def line(self) -> str:
        """The limits as `gateway --dry-run` and the start line show them."""
        each = ", ".join(f"{s} {c}" for s, c in zip(self.servers, self.maxconn, strict=True))
        return (
            f"model {self.model}: at once {sum(self.maxconn)} ({each}); queued at most {self.wait_s:g}s "
            f"(ttft_slo_s {self.ttft_slo_s:g} x queue_share), then 429 Retry-After {self.retry_after_s}"
        )


def model_routes(served: Sequence[Served], gateway: GatewayConfig) -> tuple[ModelRoute, ...]:
    """One route per served model, in first-seen order; ConfigError naming every limit the engines cannot hold."""
    models = list(dict.fromkeys(s.model for s in served))
    problems = [_bad_name(s) for s in served if not _MODEL_NAME.fullmatch(s.model)]
    problems += [_unserved(name, models) for name in gateway.models if name not in models]
    routes: list[ModelRoute] = []
    for model in models:
        own = gateway.models.get(model)
        engines = [s for s in served if s.model == model]
        wanted = own.max_concurrency if own and own.max_concurrency else None
        problems += [_above(model, wanted, s) for s in engines if wanted and wanted > s.max_concurrency]
        slo = own.ttft_slo_s if own and own.ttft_slo_s else gateway.ttft_slo_s
        limits = tuple(wanted or s.max_concurrency for s in engines)
        servers = tuple(s.name for s in engines)
        name = _backend_name(model, {r.backend for r in routes})
        routes.append(ModelRoute(model, name, servers, limits, slo, slo * gateway.queue_share))
    if problems:
        raise ConfigError(tuple(problems))
    return tuple(routes)


def _backend_name(model: str, taken: set[str]) -> str:
    """`model:<model>`, any character a proxy name cannot hold as `_`, suffixed when two models would share it."""
    name = MODEL_BACKEND + _NOT_IN_PROXY_NAME.sub("_", model)
    unique, count = name, 1
    while unique in taken:
        count += 1
        unique = f"{name}_{count}"
    return unique


def _above(model: str, wanted: int, engine: Served) -> Problem:
    return Problem(
        code="gateway-limit",
        key=f"gateway.models.{model}.max_concurrency",
        message=f"{wanted} is above what {engine.name} runs at once ({engine.max_concurrency}, its plan's)",
        fix=f"Set it to {engine.max_concurrency} or less, or raise serving.max_concurrency on the appliance",
    )


def _unserved(name: str, models: Sequence[str]) -> Problem:
    return Problem(
        code="gateway-limit",
        key=f"gateway.models.{name}",
        message=f"no appliance of the site serves {name!r} (served: {', '.join(models)})",
        fix="Name a served model (model.served_name), or drop the entry",
    )


def _bad_name(engine: Served) -> Problem:
    return Problem(
        code="gateway-backend",
        key=engine.name,
        message=f"its served model name {engine.model!r} has characters the gateway cannot route on",
        fix="Give it a model.served_name of letters, digits and . _ : / @ + -",
    )
