"""Load: token rates with sparklines, concurrency against the validated maximum, KV and prefix cache.

One panel of text lines, the sparklines among them: four of its lines change each second under
load, and one widget repainting four lines costs Textual far less than four widgets repainting one.
"""

from __future__ import annotations

from rich.text import Text
from textual.events import Resize

from tui.view import ApplianceView
from tui.widgets.format import MISSING, number, percent
from tui.widgets.panels import Panel
from tui.widgets.trend import draw_trend

__all__ = ["LoadPanel"]


class LoadPanel(Panel):
    TITLE = "load"

    def shows(self, view: ApplianceView) -> object:
        return view.summary, _limit(view), view.polled.metrics_error, self.content_size.width

    def on_resize(self, _: Resize) -> None:
        self.watch_view(self.view)  # the sparklines are drawn to the panel's width

    def render_view(self, view: ApplianceView) -> Text:
        summary = view.summary
        if summary is None:
            return Text(f"no engine metrics: {view.polled.metrics_error or 'not polled yet'}")
        width, spark, limit = self.content_size.width, self.app.theme_variables.get("primary", ""), _limit(view)
        kv = percent(summary.kv_usage)
        if summary.kv_capacity_tokens is not None and summary.kv_usage is not None:
            kv += f" of {summary.kv_capacity_tokens:,.0f} tokens"
        return Text.assemble(
            f"prompt      {number(summary.prompt_tps, '.1f')} tok/s\n",
            (draw_trend(summary.prompt_tps_history, width, 1), spark),
            f"\n\ngeneration  {number(summary.generation_tps, '.1f')} tok/s\n",
            (draw_trend(summary.generation_tps_history, width, 1), spark),
            f"\n\nrunning {number(summary.running)} / max {MISSING if limit is None else limit}   "
            f"waiting {number(summary.waiting)}\n"
            f"KV cache {kv}\n"
            f"prefix cache hits {percent(summary.prefix_hit_rate)}   "
            f"preemptions {number(summary.preemptions)}   failed requests {number(summary.failed_requests)}",
        )


def _limit(view: ApplianceView) -> int | None:
    """The validated max_concurrency the running count is shown against."""
    state = view.polled.state
    return state.max_concurrency if state is not None else None
