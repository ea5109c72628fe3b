"""Parse one vLLM /metrics page into a sample with canonical names, every engine merged.

Types come from the page's `# TYPE` lines (prometheus_client's parser), never from a name:
`vllm:iteration_tokens_total` is a histogram despite its suffix. Names vLLM has renamed are
mapped to the current ones. Data-parallel engines (the `engine` label) are summed, histogram
buckets are merged only where their bounds match, and KV usage is weighted by each engine's
capacity: averaging fractions or percentiles across engines would be wrong.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

__all__ = ["ALIASES", "EngineSample", "Histogram", "parse_metrics"]

ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc",
        "vllm:time_per_output_token_seconds": "vllm:inter_token_latency_seconds",
        "vllm:gpu_prefix_cache_queries": "vllm:prefix_cache_queries",
        "vllm:gpu_prefix_cache_hits": "vllm:prefix_cache_hits",
    }
)
"""Deprecated family name -> the name current vLLM uses (counter families without `_total`)."""

KV_USAGE = "vllm:kv_cache_usage_perc"
_START = "process_start_time_seconds"
_SUFFIXES = ("_total", "_bucket", "_count", "_sum")
_ENGINE_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", KV_USAGE)
_IDENTITY_LABELS = frozenset({"engine", "model_name"})


@dataclass(frozen=True, slots=True)
class Histogram:
    """Cumulative bucket counts, as exposed; the last bound is +Inf."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    count: float
    sum: float

    def plus(self, other: Histogram) -> Histogram:
        return Histogram(
            self.bounds,
            tuple(a + b for a, b in zip(self.cumulative, other.cumulative, strict=True)),
            self.count + other.count,
            self.sum + other.sum,
        )

    def since(self, earlier: Histogram) -> Histogram:
        """Observations made after `earlier`; all of these when the engine restarted in between."""
        pairs = zip(self.cumulative, earlier.cumulative, strict=True)
        if earlier.bounds != self.bounds or any(b > a for a, b in pairs):
            return self
        return Histogram(
            self.bounds,
            tuple(a - b for a, b in zip(self.cumulative, earlier.cumulative, strict=True)),
            self.count - earlier.count,
            self.sum - earlier.sum,
        )


@dataclass(frozen=True, slots=True)
class EngineSample:
    """One scrape. Series keys are the family name, or `family{label=value}` per extra label value."""

    at: float
    """When it was taken (the caller's monotonic clock, seconds)."""
    counters: Mapping[str, float]
    gauges: Mapping[str, float]
    histograms: Mapping[str, Histogram]
    per_engine: Mapping[str, Mapping[str, float]]
    """Engine index -> running, waiting and KV usage of that engine alone."""
    kv_capacity_tokens: float | None
    """Sum of `cache_config_info{kv_cache_size_tokens}` over engines; None when any engine lacks it."""
    started: float | None
    """The API server's process start time: it changes when the engine restarts."""


def parse_metrics(text: str, at: float, keep: Collection[str] | None = None) -> EngineSample:
    """The sample a /metrics page describes; families it lacks are simply absent.

    `keep` (current family names) limits parsing to what the caller reads: the text parser costs
    about 15 ms for a full vLLM page, mostly in histograms a console never shows.
    """
    if keep is not None:
        text = _only(text, {*keep, *(old for old, new in ALIASES.items() if new in keep), _START})
    families, started = _families(text)
    per_engine: dict[str, dict[str, float]] = defaultdict(dict)
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    histograms: dict[str, Histogram] = {}
    for name, family in families.items():
        if family.type == "counter":
            _add_series(counters, name, (s for s in family.samples if s.name.endswith("_total")))
        elif family.type == "gauge" and name != "vllm:cache_config_info":
            _add_series(gauges, name, family.samples)
            for s in family.samples:
                if name in _ENGINE_GAUGES:
                    per_engine[s.labels.get("engine", "0")][name] = s.value
        elif family.type == "histogram" and (merged := _merge_histograms(family.samples)) is not None:
            histograms[name] = merged
    capacity = _kv_capacity(families.get("vllm:cache_config_info"), set(per_engine))
    if KV_USAGE in gauges:
        gauges[KV_USAGE] = _weighted_kv(per_engine, capacity)
    return EngineSample(
        at=at,
        counters=MappingProxyType(counters),
        gauges=MappingProxyType(gauges),
        histograms=MappingProxyType(histograms),
        per_engine=MappingProxyType({e: MappingProxyType(v) for e, v in sorted(per_engine.items())}),
        kv_capacity_tokens=None if capacity is None else sum(capacity.values()),
        started=started,
    )


def _families(text: str) -> tuple[dict[str, Metric], float | None]:
    """vLLM's families under their current names, and the server's start time."""
    families: dict[str, Metric] = {}
    started = None
    for family in text_string_to_metric_families(text):
        name = ALIASES.get(family.name, family.name)
        if name.endswith(("_created", "_info")) and name != "vllm:cache_config_info":
            continue  # creation stamps and info labels are not load; cache_config_info carries capacity
        if name.startswith("vllm:") and (name not in families or family.name == name):
            families[name] = family  # the current name wins when a page still carries both
        elif name == _START and family.samples:
            started = family.samples[0].value
    return families, started


def _add_series(into: dict[str, float], name: str, samples: Iterable[Sample]) -> None:
    for sample in samples:
        into[name] = into.get(name, 0.0) + sample.value
        for label, value in sample.labels.items():
            if label not in _IDENTITY_LABELS:
                key = f"{name}{{{label}={value}}}"
                into[key] = into.get(key, 0.0) + sample.value


def _merge_histograms(samples: Iterable[Sample]) -> Histogram | None:
    """One histogram summed over engines; None when the engines' bucket bounds differ."""
    buckets: dict[str, dict[float, float]] = defaultdict(dict)
    sums: dict[str, float] = defaultdict(float)
    for s in samples:
        engine = s.labels.get("engine", "0")
        if s.name.endswith("_bucket"):
            buckets[engine][float(s.labels["le"])] = s.value
        elif s.name.endswith("_sum"):
            sums[engine] += s.value
    merged: Histogram | None = None
    for engine, by_bound in buckets.items():
        bounds = tuple(sorted(by_bound))
        if not bounds or not math.isinf(bounds[-1]):
            return None
        one = Histogram(bounds, tuple(by_bound[b] for b in bounds), by_bound[bounds[-1]], sums[engine])
        if merged is not None and merged.bounds != one.bounds:
            return None
        merged = one if merged is None else merged.plus(one)
    return merged


def _kv_capacity(info: Metric | None, engines: set[str]) -> dict[str, float] | None:
    capacity = {
        s.labels.get("engine", "0"): float(s.labels["kv_cache_size_tokens"])
        for s in (info.samples if info is not None else ())
        if s.labels.get("kv_cache_size_tokens", "None") != "None"
    }
    return capacity if capacity and engines <= set(capacity) else None


def _weighted_kv(per_engine: Mapping[str, Mapping[str, float]], capacity: Mapping[str, float] | None) -> float:
    usage = {e: g[KV_USAGE] for e, g in per_engine.items() if KV_USAGE in g}
    if capacity is None or not sum(capacity[e] for e in usage):
        return sum(usage.values()) / len(usage)  # equal weights: the best guess without capacities
    return sum(u * capacity[e] for e, u in usage.items()) / sum(capacity[e] for e in usage)


def _only(text: str, families: set[str]) -> str:
    """The page's lines that belong to `families`, comments included, in their order."""
    kept = []
    for line in text.splitlines():
        words = line.split(" ", 3)
        name = (words[2] if len(words) > 2 else "") if line.startswith("#") else line.split("{", 1)[0].split(" ", 1)[0]
        for suffix in _SUFFIXES:
            if name.endswith(suffix) and name[: -len(suffix)] in families:
                name = name[: -len(suffix)]
                break
        if name in families:
            kept.append(line)
    return "\n".join(kept) + "\n"
