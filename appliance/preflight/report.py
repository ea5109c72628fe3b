"""The pilot report: the document a fleet decision is made on, as JSON and as Markdown.

Both forms stand alone: host facts, the resolved config and launch plan, every check with its
evidence and fix, and the verdict. Nothing secret enters them: the plan holds secret variable
names only, and install URLs of the engine's packages (which may carry credentials) are left out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic_core import to_jsonable_python

from appliance import markdown
from appliance.engines.engine_env import EngineEnv, TtnnProbe
from appliance.host.discovery import HostFacts
from appliance.plan import LaunchPlan
from appliance.preflight.results import CheckResult, CheckStatus

__all__ = ["PilotReport", "report_json", "report_markdown", "verdict_line"]

_MARK = {"pass": "✅ pass", "warn": "⚠️ warn", "fail": "❌ fail", "unknown": "❔ unknown"}


@dataclass(frozen=True, slots=True)
class PilotReport:
    generated_at: str
    host_name: str
    appliance_version: str
    host: HostFacts
    engine: EngineEnv | None
    engine_error: str | None
    ttnn: TtnnProbe | str
    plan: LaunchPlan
    checks: tuple[CheckResult, ...]
    verdict: CheckStatus
    """The worst status: fail > unknown > warn > pass."""

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for c in self.checks if c.status == s) for s in ("pass", "warn", "fail", "unknown")}


def verdict_line(report: PilotReport) -> str:
    """One line: the decision and the counts behind it."""
    n = report.counts()
    decision = {
        "fail": "NOT READY: a check fails",
        "unknown": "INCOMPLETE: some checks could not be decided",
        "warn": "READY WITH WARNINGS",
        "pass": "READY",
    }[report.verdict]
    return f"{decision} ({n['pass']} pass, {n['warn']} warn, {n['fail']} fail, {n['unknown']} unknown)"


def report_json(report: PilotReport) -> dict[str, Any]:
    plan = report.plan.to_json()
    return {
        "verdict": report.verdict,
        "summary": verdict_line(report),
        "generated_at": report.generated_at,
        "host_name": report.host_name,
        "appliance_version": report.appliance_version,
        "host": to_jsonable_python(report.host, fallback=dict),
        "engine": _engine(report),
        "ttnn": to_jsonable_python(report.ttnn, fallback=dict),
        "config": {k: plan.get(k) for k in ("choices", "config_hash", "resolved", "provenance")},
        "plan": {k: plan[k] for k in ("engine", "python", "argv", "env", "secret_env", "health_url", "mesh")},
        "command_line": report.plan.command_line(),
        "checks": [to_jsonable_python(c, fallback=dict) for c in report.checks],
    }


def report_markdown(report: PilotReport) -> str:
    plan = report.plan
    lines = [
        f"# Pilot report: {plan.checkpoint} on {plan.mesh} ({plan.engine} engine)",
        "",
        f"**Verdict: {verdict_line(report)}**",
        "",
        f"Host `{report.host_name}`, site `{plan.site}`, config `{plan.config_hash}`, generated {report.generated_at} "
        f"by tt-appliance {report.appliance_version}.",
        "",
        markdown.table(
            ("check", "status", "summary"),
            ((f"{c.title} (`{c.id}`)", _MARK[c.status], c.summary) for c in report.checks),
        ),
        "",
        "## Host",
        "",
        *_host_lines(report),
        "",
        "## Config and launch plan",
        "",
        *(f"- `{group}`: {option}" for group, option in plan.choices.items()),
        "",
        "```",
        plan.command_line(),
        "```",
        "",
        "## Checks",
    ]
    for c in report.checks:
        lines += ["", f"### {c.title}: {_MARK[c.status]}", "", c.summary + ("" if c.summary.endswith(".") else ".")]
        lines += [""] + [f"- {key}: {_value(value)}" for key, value in c.evidence.items()]
        if c.fix:
            lines += ["", f"**Fix:** {c.fix}"]
    return "\n".join(lines) + "\n"


def _host_lines(report: PilotReport) -> list[str]:
    host = report.host
    pages = host.hugepages_1g
    lines = [
        f"- boards: {', '.join(f'{b.index}: {b.card_type} fw {b.firmware}' for b in host.boards) or 'none'}",
        f"- KMD: {host.kmd_version or 'not loaded'}",
        f"- 1 GiB hugepages: {f'{pages.free} free of {pages.total} ({pages.mount})' if pages else 'no pool'}",
        f"- memory: {_gib(host.mem_available_bytes)} available of {_gib(host.mem_total_bytes)}",
        f"- tt-smi: {_smi(report)}",
        f"- board health: {_health(report)}",
        f"- engine environment: {_engine_text(report)}",
    ]
    return lines


def _smi(report: PilotReport) -> str:
    smi = report.host.tt_smi
    if smi is None:
        return report.host.tt_smi_error or "not asked"
    temps = [d.asic_temperature_c for d in smi.devices if d.asic_temperature_c is not None]
    hottest = f", hottest ASIC {max(temps):.1f} °C" if temps else ""
    return f"{len(smi.devices)} chip(s), driver {smi.kmd_version}{hottest}, {len(smi.processes)} holder(s)"


def _health(report: PilotReport) -> str:
    """Each board's temperature, power, AI clock and heartbeat as discovery read them (unknown where unreadable)."""
    said = [
        f"{r.board}: {_reading(r.temperature_c, '°C')}, {_reading(r.power_w, 'W')}, aiclk "
        f"{_reading(r.aiclk_mhz, 'MHz')}, heartbeat {_reading(r.heartbeat, '')}, trips "
        f"{'unknown' if r.therm_trips is None else r.therm_trips}"
        for r in report.host.readings
    ]
    return "; ".join(said) or "no board"


def _reading(value: float | None, unit: str) -> str:
    return "unknown" if value is None else f"{value:g} {unit}".rstrip()


def _engine(report: PilotReport) -> dict[str, Any] | None:
    env = report.engine
    if env is None:
        return {"error": report.engine_error}
    return {
        "interpreter": env.interpreter,
        "python": env.python,
        "vllm": {"distribution": env.vllm_distribution, "version": env.vllm_version, "path": env.vllm_path},
        "entry_points": [to_jsonable_python(e) for e in env.entry_points],
        "distributions": dict(env.distributions),
    }


def _engine_text(report: PilotReport) -> str:
    env = report.engine
    if env is None:
        return str(report.engine_error)
    return f"{env.interpreter} (Python {env.python}, {env.vllm_distribution} {env.vllm_version})"


def _value(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "none" if not value else "".join(f"\n  - {markdown.cell(str(v))}" for v in value)
    if isinstance(value, dict):
        return json.dumps(value)
    return f"`{value}`" if isinstance(value, int | float) and not isinstance(value, bool) else str(value)


def _gib(value: int | None) -> str:
    return f"{value / 1024**3:.1f} GiB" if value is not None else "unknown"
