"""Requested versus effective: what the plan asked the engine for, and what the running engine enabled.

The effective side is read from the engine itself: vLLM's config line (`Initializing a V1 LLM engine ...
with config: ...`), its WARNINGs about what it ignored or turned off, vllm-tt-plugin's own log lines on TT
(prefix caching, async scheduling and chunked prefill dropped; lane-DP; class overrides), and the
`/metrics` info gauge `vllm:cache_config_info`. Anything neither side states stays None: unknown, not no.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from appliance.compat.engine_flags import read_back
from appliance.errors import Problem
from appliance.plan import LaunchPlan

__all__ = ["Capabilities", "differences", "effective", "requested", "with_metrics"]


@dataclass(frozen=True, slots=True)
class Capabilities:
    """Serving capabilities as one side sees them; None where that side does not say."""

    prefix_caching: bool | None = None
    chunked_prefill: bool | None = None
    async_scheduling: bool | None = None
    speculative: str | None = None
    """The speculative method, or "off"."""
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    """Concurrent sequences for the whole engine (all lanes)."""
    max_num_batched_tokens: int | None = None
    compact_json: bool | None = None
    """Structured output without free whitespace (vLLM's disable_any_whitespace)."""
    data_parallel: int | None = None
    kv_cache_memory_bytes: int | None = None
    set_env: tuple[str, ...] = ()
    """VLLM_* variables the plan sets (requested side)."""
    ignored_env: tuple[str, ...] = ()
    """VLLM_* variables the engine reported as unknown (effective side)."""
    sources: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Field -> where its value was read (a flag, a log line, a metric)."""


def requested(plan: LaunchPlan) -> Capabilities:
    """What the plan asks for, read back from its argv with the flag table, with what it lists as the plugin's
    adjustments."""
    flags = read_back(plan.argv)
    spec = flags.get("speculative_config")
    dp = flags.get("data_parallel_size", 1)
    seqs = flags.get("max_num_seqs")
    values: dict[str, Any] = {
        "prefix_caching": flags.get("enable_prefix_caching"),
        "chunked_prefill": flags.get("enable_chunked_prefill"),
        "async_scheduling": flags.get("async_scheduling"),
        "max_model_len": flags.get("max_model_len"),
        "max_num_batched_tokens": flags.get("max_num_batched_tokens"),
        "kv_cache_memory_bytes": flags.get("kv_cache_memory_bytes"),
        "speculative": "off" if spec is None else str(spec.get("method", "on")) if isinstance(spec, dict) else "on",
        "max_num_seqs": None if seqs is None else seqs * dp,
        "data_parallel": 1 if plan.engine == "tt" and _lanes(plan) else dp,
    }
    adjusted = {a.id for a in plan.adjustments}
    if "compact_json" in adjusted:
        values["compact_json"] = True
    known = {k: v for k, v in values.items() if v is not None}
    return Capabilities(
        **known,
        set_env=tuple(n for n in plan.env if n.startswith("VLLM_")),
        sources=MappingProxyType(dict.fromkeys(known, "plan")),
    )


def _lanes(plan: LaunchPlan) -> bool:
    return any(a.id == "lane_dp_fold" for a in plan.adjustments)


# What a log line says about a capability: pattern -> (field, value or the group to read).
_CONFIG_LINE = re.compile(r"Initializing a V1 LLM engine \(v[^)]*\) with config: (.*)")
_CONFIG_FIELDS = {
    "prefix_caching": (r"\benable_prefix_caching=(True|False)", "bool"),
    "chunked_prefill": (r"\benable_chunked_prefill=(True|False)", "bool"),
    "max_model_len": (r"\bmax_seq_len=(\d+)", "int"),
    "data_parallel": (r"\bdata_parallel_size=(\d+)", "int"),
    "compact_json": (r"\bdisable_any_whitespace=(True|False)", "bool"),
    "speculative": (r"\bspeculative_config=(None|SpeculativeConfig\(method='[^']+')", "spec"),
}
_WARNINGS: tuple[tuple[re.Pattern[str], str, Any], ...] = (
    (re.compile(r"Prefix caching is not supported in TT backend"), "prefix_caching", False),
    (re.compile(r"Automatic prefix caching is (enabled|disabled)"), "prefix_caching", "enabled"),
    (re.compile(r"Async scheduling was requested, but TT model"), "async_scheduling", False),
    (
        re.compile(r"Async scheduling (?:not supported|is not compatible|will be disabled|is disabled)"),
        "async_scheduling",
        False,
    ),
    (re.compile(r"Chunked prefill is not supported for "), "chunked_prefill", False),
    (re.compile(r"Chunked prefill enabled for "), "chunked_prefill", True),
    (re.compile(r"Chunked prefill enabled for .*max_num_batched_tokens=(\d+)"), "max_num_batched_tokens", int),
    (
        re.compile(r"max_num_batched_tokens=\d+ < max_model_len=(\d+) with chunked prefill disabled, bumping"),
        "max_num_batched_tokens",
        int,
    ),
    (
        re.compile(r"lane-DP instead \((\d+) lanes, per-lane max_num_seqs=\d+, global max_num_seqs=(\d+)\)"),
        "max_num_seqs",
        "lanes",
    ),
)
_UNKNOWN_ENV = re.compile(r"Unknown vLLM environment variable detected: (\S+)")


def effective(log_lines: Iterable[str], metrics_page: str | None = None) -> Capabilities:
    """What the running engine enabled, from its own log lines and (optionally) its /metrics page."""
    found: dict[str, Any] = {}
    sources: dict[str, str] = {}
    unread: list[str] = []
    for line in log_lines:
        config = _CONFIG_LINE.search(line)
        if config:
            _read_config_line(config.group(1), found, sources)
        for pattern, name, how in _WARNINGS:
            match = pattern.search(line)
            if match:
                found[name] = _warning_value(how, match, found)
                sources[name] = _excerpt(line)
        unknown = _UNKNOWN_ENV.search(line)
        if unknown and unknown.group(1) not in unread:
            unread.append(unknown.group(1))
    if metrics_page:
        _read_cache_info(metrics_page, found, sources)
    return Capabilities(**found, ignored_env=tuple(unread), sources=MappingProxyType(sources))


def with_metrics(caps: Capabilities, metrics_page: str) -> Capabilities:
    """`caps` with what a /metrics page adds: the log is read once per boot, since its config line scrolls out of the
    kept tail under load, and the page may come later."""
    found: dict[str, Any] = {}
    sources = dict(caps.sources)
    _read_cache_info(metrics_page, found, sources)
    return replace(caps, **found, sources=MappingProxyType(sources))


def _read_config_line(text: str, found: dict[str, Any], sources: dict[str, str]) -> None:
    for name, (pattern, kind) in _CONFIG_FIELDS.items():
        match = re.search(pattern, text)
        if match is None:
            continue
        raw = match.group(1)
        if kind == "bool":
            found[name] = raw == "True"
        elif kind == "int":
            found[name] = int(raw)
        else:
            found[name] = "off" if raw == "None" else raw.split("'")[1]
        sources[name] = f"vLLM's engine config line ({match.group(0)})"


def _warning_value(how: Any, match: re.Match[str], found: dict[str, Any]) -> Any:
    if how == "enabled":
        return match.group(1) == "enabled"
    if how is int:
        return int(match.group(1))
    if how == "lanes":
        found["data_parallel"] = 1
        return int(match.group(2))
    return how


def _read_cache_info(page: str, found: dict[str, Any], sources: dict[str, str]) -> None:
    """vllm:cache_config_info's labels: prefix caching and KV memory as the engine runs them (engine 0)."""
    for family in text_string_to_metric_families(page):
        if family.name != "vllm:cache_config_info":
            continue
        for sample in family.samples[:1]:
            labels = sample.labels
            if labels.get("enable_prefix_caching") in ("True", "False"):
                found["prefix_caching"] = labels["enable_prefix_caching"] == "True"
                sources["prefix_caching"] = "/metrics vllm:cache_config_info enable_prefix_caching"
            if labels.get("kv_cache_memory_bytes", "").isdigit():
                found["kv_cache_memory_bytes"] = int(labels["kv_cache_memory_bytes"])
                sources["kv_cache_memory_bytes"] = "/metrics vllm:cache_config_info kv_cache_memory_bytes"


def _excerpt(line: str) -> str:
    return line.strip()[:160]


def differences(want: Capabilities, got: Capabilities) -> tuple[Problem, ...]:
    """Each capability the plan states that the engine runs otherwise; each variable the engine ignored."""
    found: list[Problem] = []
    for item in fields(Capabilities):
        name = item.name
        if name in ("set_env", "ignored_env", "sources"):
            continue
        asked, runs = getattr(want, name), getattr(got, name)
        if asked is not None and runs is not None and asked != runs:
            found.append(
                Problem(
                    code="capability-differs",
                    key=name,
                    message=f"the plan asks for {name}={asked}, the engine runs "
                    f"{name}={runs} ({got.sources.get(name, 'engine')})",
                    fix="Plan what the engine can run, or find why it refused",
                    severity="warning",
                )
            )
    for name in got.ignored_env:
        if name in want.set_env:
            found.append(
                Problem(
                    code="env-not-read",
                    key=f"engine.env.{name}",
                    message=f"the plan sets {name}, which the engine reports as unknown",
                    fix=f"Remove {name} from the plan",
                    severity="warning",
                )
            )
    return tuple(found)
