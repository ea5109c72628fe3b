"""The appliance's identity and lifecycle on one line, its alerts on the next."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import var

from appliance.control.upgrade_documents import generation_lines
from tui.view import ApplianceView
from tui.widgets.format import STATE_STYLE, duration
from tui.widgets.quiet import QuietText

__all__ = ["ApplianceHeader"]


class ApplianceHeader(QuietText):
    DEFAULT_CSS = """
    ApplianceHeader { height: 3; padding: 0 1; background: $panel; }
    """

    view: var[ApplianceView | None] = var(None)

    def watch_view(self, view: ApplianceView | None) -> None:
        self.show(_render(view))


def _render(view: ApplianceView | None) -> Text:
    if view is None:
        return Text("waiting for the first poll…", style="dim")
    state = view.polled.state
    text = Text.assemble((view.name, "bold"), "  ")
    if state is None:
        text.append("● UNREACHABLE", STATE_STYLE["unreachable"])
        text.append(f"  {view.polled.url}\n{view.polled.error}", "red")
        return text
    text.append(f"● {state.state.upper()}", STATE_STYLE.get(state.state, ""))
    for label, value in (
        ("site", state.site),
        ("family", state.family),
        ("checkpoint", state.checkpoint),
        ("mesh", state.mesh),
        ("engine", state.engine),
        ("up", duration(state.uptime_s)),
        ("restarts", str(state.restarts)),
        ("config", state.config_hash),
    ):
        text.append(f"  {label} ", "dim")
        text.append(value)
    if state.boot is not None:
        boot = state.boot
        known = (
            "building the tensor cache, no ETA"
            if boot.tensor_cache_built is False
            else "first boot here, no ETA"
            if boot.eta_s is None
            else f"ETA {duration(boot.eta_s)}"
        )
        text.append(f"\nbooting: {boot.phase} {duration(boot.elapsed_s)} ({known})", "red" if boot.slow else "cyan")
    upgrade = generation_lines(state.generation, state.previous_generation, state.upgrade)[1:]
    if upgrade:
        text.append(
            "\n" + " ".join(line.strip() for line in upgrade), "cyan" if "upgrading" in upgrade[0] else "yellow"
        )
    if state.last_error:
        text.append(f"\nlast error: {state.last_error}", "red")
    if view.alerts:
        text.append("\n⚠ " + " · ".join(view.alerts), "yellow")
    return text
