"""Load: token rates with sparklines, concurrency against the validated maximum, KV and prefix cache."""

from __future__ import annotations

from rich.text import Text
from textual import getters
from textual.app import ComposeResult
from textual.reactive import var
from textual.widget import Widget

from tui.view import ApplianceView
from tui.widgets.format import MISSING, number, percent
from tui.widgets.quiet import QuietStatic
from tui.widgets.trend import Trend

__all__ = ["LoadPanel"]


class LoadPanel(Widget):
    DEFAULT_CSS = """
    LoadPanel { height: auto; border: round $primary; border-title-color: $text; padding: 0 1; }
    LoadPanel Trend { margin-bottom: 1; }
    LoadPanel QuietStatic { height: auto; }
    """

    view: var[ApplianceView | None] = var(None)
    prompt_rate = getters.query_one("#prompt-rate", QuietStatic)
    prompt_spark = getters.query_one("#prompt-spark", Trend)
    generation_rate = getters.query_one("#generation-rate", QuietStatic)
    generation_spark = getters.query_one("#generation-spark", Trend)
    occupancy = getters.query_one("#occupancy", QuietStatic)

    def compose(self) -> ComposeResult:
        self.border_title = "load"
        yield QuietStatic(id="prompt-rate")
        yield Trend(id="prompt-spark")
        yield QuietStatic(id="generation-rate")
        yield Trend(id="generation-spark")
        yield QuietStatic(id="occupancy")

    _shown: tuple[object, ...] | None = None

    def watch_view(self, view: ApplianceView | None) -> None:
        summary = view.summary if view is not None else None
        state = view.polled.state if view is not None else None
        limit = state.max_concurrency if state is not None else None
        reason = view.polled.metrics_error if view is not None else None
        shown = (summary, limit, reason)
        if shown == self._shown:
            return  # the same load as last poll: nothing here is rebuilt
        self._shown = shown
        if summary is None:
            self.prompt_rate.show(Text(f"no engine metrics: {reason or 'not polled yet'}"))
            return
        self.prompt_rate.show(Text(f"prompt      {number(summary.prompt_tps, '.1f')} tok/s"))
        self.generation_rate.show(Text(f"generation  {number(summary.generation_tps, '.1f')} tok/s"))
        self.prompt_spark.samples = summary.prompt_tps_history
        self.generation_spark.samples = summary.generation_tps_history
        kv = percent(summary.kv_usage)
        if summary.kv_capacity_tokens is not None and summary.kv_usage is not None:
            kv += f" of {summary.kv_capacity_tokens:,.0f} tokens"
        self.occupancy.show(
            Text(
                f"running {number(summary.running)} / max {MISSING if limit is None else limit}   "
                f"waiting {number(summary.waiting)}\n"
                f"KV cache {kv}\n"
                f"prefix cache hits {percent(summary.prefix_hit_rate)}   "
                f"preemptions {number(summary.preemptions)}   failed requests {number(summary.failed_requests)}"
            )
        )
