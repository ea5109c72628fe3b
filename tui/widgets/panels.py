"""Text panels of the dashboard: the `Panel` they share (the load panel too), and latency,
scheduler, devices and checks.

Each redraws from the ApplianceView bound to it, and only when the part of it the panel shows
changed; none of them computes anything beyond layout.
"""

from __future__ import annotations

from rich.text import Text
from textual.reactive import var

from appliance.control.documents import E2E, ITL, TTFT, BoardDocument, LatencyDocument
from tui.view import ApplianceView
from tui.widgets.format import IDLE, MISSING, gib, millis, number, percent
from tui.widgets.quiet import QuietText

__all__ = ["ChecksPanel", "DevicesPanel", "LatencyPanel", "Panel", "SchedulerPanel"]


class Panel(QuietText):
    DEFAULT_CSS = """
    Panel { height: auto; border: round $primary; border-title-color: $text; padding: 0 1; }
    """
    TITLE = ""
    view: var[ApplianceView | None] = var(None)
    _shown: tuple[bool, object] | None = None

    def on_mount(self) -> None:
        self.border_title = self.TITLE

    def watch_view(self, view: ApplianceView | None) -> None:
        shown = (False, None) if view is None else (True, self.shows(view))
        if shown == self._shown:
            return  # what this panel shows did not change: not even its text is rebuilt
        self._shown = shown
        text = self.render_view(view) if view is not None else Text("not polled yet", style="dim")
        text.rstrip()
        self.show(text)

    def shows(self, view: ApplianceView) -> object:
        """The part of the view this panel renders."""
        raise NotImplementedError

    def render_view(self, view: ApplianceView) -> Text:
        raise NotImplementedError


class LatencyPanel(Panel):
    TITLE = "latency"

    def shows(self, view: ApplianceView) -> object:
        summary = view.summary
        return None if summary is None else (summary.ttft, summary.itl, summary.e2e, summary.missing, summary.window_s)

    def render_view(self, view: ApplianceView) -> Text:
        summary = view.summary
        if summary is None:
            return Text("no engine metrics", style="dim")
        span = "since engine start" if summary.window_s is None else f"last {summary.window_s:.0f} s"
        text = Text(f"{'':<13}{'p50':>10}{'p95':>11}{'p99':>11}{'n':>8}\n", style="bold")
        rows = (("TTFT", summary.ttft, TTFT), ("inter-token", summary.itl, ITL), ("end to end", summary.e2e, E2E))
        for label, value, family in rows:
            p50, p95, p99, n = _percentile_cells(value, family in summary.missing)
            text.append(f"{label:<13}{p50:>10}{p95:>11}{p99:>11}{n:>8}\n")
        text.append(f"from histogram bucket deltas, {span}", "dim")
        return text


def _percentile_cells(value: LatencyDocument | None, missing: bool) -> tuple[str, str, str, str]:
    if value is None:
        blank = MISSING if missing else IDLE
        return blank, blank, blank, "0"
    return millis(value.p50), millis(value.p95), millis(value.p99), f"{value.observations:.0f}"


class SchedulerPanel(Panel):
    TITLE = "scheduler"

    def shows(self, view: ApplianceView) -> object:
        return (view.summary.steps if view.summary is not None else None), view.scheduler

    def render_view(self, view: ApplianceView) -> Text:
        text = Text()
        steps = view.summary.steps if view.summary is not None else None
        if steps is None:
            text.append("no steps in the window\n", "dim")
        else:
            text.append(
                f"{steps.steps:.0f} steps, {steps.tokens_per_step:.1f} tokens/step "
                f"(p50 {steps.p50_tokens:.0f}, p95 {steps.p95_tokens:.0f}), "
                f"prefill share {percent(steps.prompt_share)}\n"
            )
            text.append("tokens/step ≤ " + "  ".join(f"{b:g}:{n:.0f}" for b, n in steps.distribution) + "\n", "dim")
        log = view.scheduler
        if log is not None and log.steps:
            text.append(
                f"logged steps {log.steps}: {log.prefill_steps} with prefill, "
                f"{log.context_tokens_per_step:.1f} prompt + {log.generation_tokens_per_step:.1f} decode tokens/step, "
                f"prefill step {millis(_ms(log.prefill_step_ms))}, decode step {millis(_ms(log.decode_step_ms))}\n"
            )
        elif log is not None:
            text.append("per-step split: add --enable-logging-iteration-details to engine.extra_args\n", "dim")
        if log is not None and log.stats_line:
            head, _, tail = log.stats_line.partition(" reqs, ")  # after Running/Waiting: fits two lines
            text.append(f"{head} reqs,\n  {tail}" if tail else head, "cyan")
        return text


def _ms(value: float | None) -> float | None:
    return None if value is None else value / 1000


class DevicesPanel(Panel):
    TITLE = "devices"

    def shows(self, view: ApplianceView) -> object:
        return view.polled.host

    def render_view(self, view: ApplianceView) -> Text:
        host = view.polled.host
        if host is None:
            return Text("no host facts", style="dim")
        devices, usage = host.devices, host.usage
        text = Text()
        for board in devices.boards:
            text.append(f"board {board.index}: {_board_facts(board)}\n")
        if devices.boards and devices.kmd_version:
            text.append(f"kmd {devices.kmd_version}\n", "dim")
        text.append(
            f"host CPU {percent(usage.cpu_busy)} of {usage.cores} cores, load {number(usage.load_1m, '.2f')}"
            f"\nmemory {gib(usage.memory_total_bytes - usage.memory_available_bytes)} used of "
            f"{gib(usage.memory_total_bytes)}, engine RSS {gib(usage.engine_rss_bytes)}"
        )
        return text


def _board_facts(board: BoardDocument) -> str:
    facts = (("card_type", board.card_type), ("firmware", board.firmware), ("serial", board.serial))
    return "  ".join(f"{k} {v}" for k, v in facts if v is not None)


_CHECK_STYLE = {"pass": "green", "warn": "yellow", "unknown": "dim", "fail": "red"}


class ChecksPanel(Panel):
    TITLE = "checks"

    def shows(self, view: ApplianceView) -> object:
        state = view.polled.state
        return view.polled.checks, None if state is None else state.capabilities

    def render_view(self, view: ApplianceView) -> Text:
        checks, capabilities = view.polled.checks, view.polled.state and view.polled.state.capabilities
        text = Text("no checks yet\n", style="dim") if checks is None else Text()
        for item in checks.checks if checks else ():
            text.append(f"{item.status:<8}", _CHECK_STYLE.get(item.status, "red"))
            text.append(f" {item.title or item.id}: {item.summary}\n")
        for line in capabilities.verdict() if capabilities else ():
            text.append(line + "\n", "yellow" if line.startswith("differs") else "dim" if "not checked" in line else "")
        return text
