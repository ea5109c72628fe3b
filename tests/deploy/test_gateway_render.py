"""The gateway's HAProxy config: one server per appliance, health from its control API's readiness."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from appliance.deploy.gateway import backend, haproxy_binary, render_haproxy
from appliance.errors import ConfigError


def test_each_appliance_is_routed_to_its_engine_and_checked_on_its_control_port(tmp_path: Path) -> None:
    backends = [
        backend("lab-01", "http://127.0.0.1:8000", "http://127.0.0.1:8100"),
        backend("lab-02", "http://10.0.4.22:8001", "http://10.0.4.22:8101"),
    ]
    text = render_haproxy(backends, "127.0.0.1:8080", check_interval_ms=250)
    assert "server lab-01 127.0.0.1:8000 check addr 127.0.0.1 port 8100" in text
    assert "server lab-02 10.0.4.22:8001 check addr 10.0.4.22 port 8101" in text
    assert "http-check send meth GET uri /readyz" in text and "inter 250ms fall 2 rise 1" in text
    assert "timeout check 2s" in text
    config = tmp_path / "haproxy.cfg"
    config.write_text(text)
    checked = subprocess.run([haproxy_binary(), "-c", "-f", str(config)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


def test_an_appliance_url_without_a_port_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match="lab-03"):
        backend("lab-03", "http://engine.lab", "http://127.0.0.1:8100")
