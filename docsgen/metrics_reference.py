"""Reference: every series of the control API's GET /metrics, read from where the registry declares it.

appliance/control/metrics.py is the one source: each `Gauge`, `Counter`, `Enum` and metric family it makes names
its series and its help text. Some exist only in some states (a boot's ETA, an upgrade's generations), so one
scrape cannot list them all: the declarations are read with `ast` (tests/docs/test_docs_reference.py checks a real
scrape shows nothing else).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from appliance.markdown import table

__all__ = ["Series", "find_series", "metrics_page"]

_KINDS = {
    "Gauge": "gauge",
    "Counter": "counter",
    "Enum": "gauge (enum)",
    "EnumMetric": "gauge (enum)",
    "GaugeMetricFamily": "gauge",
    "CounterMetricFamily": "counter",
    "InfoMetricFamily": "info",
    "_gauge": "gauge",
}


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    """The name a scrape shows (counters end in `_total`, info series in `_info`)."""
    kind: str
    help: str
    labels: tuple[str, ...]


def find_series(module: Path) -> tuple[Series, ...]:
    """Every series `module` declares, in the order it declares them."""
    found = sorted(_declared(ast.parse(module.read_text(), str(module))), key=lambda pair: pair[0])
    return tuple(dict.fromkeys(series for _, series in found))


def metrics_page(series: tuple[Series, ...]) -> str:
    lines = [
        "# Every metric",
        "",
        "Generated at build time from `appliance/control/metrics.py`: the appliance's own "
        "series on the control API's `GET /metrics` (bearer token). What a site alerts on and plots is in "
        "[Prometheus and Grafana](../guides/prometheus-grafana.md).",
        "",
    ]
    rows = [(f"`{s.name}`", s.kind, ", ".join(f"`{label}`" for label in s.labels), s.help) for s in series]
    return "\n".join([*lines, table(("series", "type", "labels", "meaning"), rows)]) + "\n"


def _declared(tree: ast.Module) -> Iterator[tuple[int, Series]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _maker(node) in _KINDS:
            texts = _strings(node.args[:2])
            if len(texts) == 2:
                yield node.lineno, _series(_maker(node), texts[0], texts[1], _labels(node))
        elif isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple):
            yield from _looped(node)


def _looped(loop: ast.For) -> Iterator[tuple[int, Series]]:
    """`for name, text, value in (("appliance_x", "help", …), …): yield _gauge(name, text, value)`."""
    makers = [_maker(n) for n in ast.walk(loop) if isinstance(n, ast.Call) and _maker(n) in _KINDS]
    rows = loop.iter.elts if isinstance(loop.iter, ast.Tuple) and makers else []
    for row in rows:
        texts = _strings(row.elts[:2]) if isinstance(row, ast.Tuple) else []
        if len(texts) == 2:
            yield row.lineno, _series(makers[0], texts[0], texts[1], ())


def _series(maker: str, name: str, text: str, labels: tuple[str, ...]) -> Series:
    kind = _KINDS[maker]
    suffix = {"counter": "_total", "info": "_info"}.get(kind, "")
    return Series(name + suffix, kind, " ".join(text.split()), (name,) if kind == "gauge (enum)" else labels)


def _maker(call: ast.Call) -> str:
    return call.func.id if isinstance(call.func, ast.Name) else ""


def _strings(nodes: list[ast.expr]) -> list[str]:
    return [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _labels(call: ast.Call) -> tuple[str, ...]:
    given = [k.value for k in call.keywords if k.arg in ("labels", "labelnames")]
    third = call.args[2:3]
    for node in (*given, *third):
        if isinstance(node, ast.List | ast.Tuple):
            return tuple(e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return ()
