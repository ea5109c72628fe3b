"""The running config: every resolved key with the file that set it, and the launch plan."""

from __future__ import annotations

import json
import shlex

from textual import getters
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Footer, Static

from tui.screens.base import ApplianceScreen
from tui.view import ApplianceView
from tui.widgets.header import ApplianceHeader

__all__ = ["ConfigScreen"]


class ConfigScreen(ApplianceScreen):
    table = getters.query_one("#config", DataTable)
    plan = getters.query_one("#plan", Static)

    def compose(self) -> ComposeResult:
        yield ApplianceHeader().data_bind(ConfigScreen.view)
        with VerticalScroll():
            yield DataTable(id="config", cursor_type="row", zebra_stripes=True)
            yield Static(id="plan")
        yield Footer()

    def on_mount(self) -> None:
        self.table.add_columns("key", "set by", "value")

    def watch_view(self, old: ApplianceView | None, new: ApplianceView | None) -> None:
        # The config changes only with a new plan; redrawing every poll would lose the cursor.
        if new is None or new.polled.state is None or _config_key(old) == _config_key(new):
            return
        state = new.polled.state
        self.table.clear()
        for key in sorted(state.provenance.keys() | state.config.keys()):
            value = state.config.get(key, "")
            shown = value if isinstance(value, str) else json.dumps(value)
            self.table.add_row(key, state.provenance.get(key, ""), shown)
        env = [f"{k}={shlex.quote(v)}" for k, v in state.plan.env.items()]
        secrets = [f"{k}=${v}" for k, v in state.plan.secret_env.items()]
        lines = [*env, *secrets, shlex.join(state.plan.argv)]
        self.plan.update("launch plan (secrets stay $NAME references):\n" + " \\\n  ".join(lines))


def _config_key(view: ApplianceView | None) -> tuple[str, str] | None:
    if view is None or view.polled.state is None:
        return None
    return view.name, view.polled.state.config_hash
