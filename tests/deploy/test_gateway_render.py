"""The gateway's HAProxy config: one backend per served model, each engine checked on its control API's readiness."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from appliance.config.compose import compose_config
from appliance.deploy.gateway import backend, haproxy_binary, render_gateway, write_gateway
from appliance.errors import ConfigError


def test_each_engine_is_routed_by_model_and_checked_on_its_control_port(tmp_path: Path) -> None:
    backends = [
        backend("lab-01", "http://127.0.0.1:8000", "http://127.0.0.1:8100", model="m", max_concurrency=8),
        backend(
            "lab-02.left", "http://10.0.4.22:8001", "http://10.0.4.22:8101", model="m", check_path="/slots/left/readyz"
        ),
    ]
    files = render_gateway(
        backends, "127.0.0.1:8080", tmp_path, compose_config([]).config.gateway, check_interval_ms=250
    )
    text = files.config
    assert "server lab-01 127.0.0.1:8000 maxconn 8 track ready_lab-01/lab-01" in text
    assert "server lab-01 127.0.0.1:8000 check addr 127.0.0.1 port 8100" in text
    assert "server lab-02.left 10.0.4.22:8001 check addr 10.0.4.22 port 8101" in text
    assert "http-check send meth GET uri /readyz" in text and "http-check send meth GET uri /slots/left/readyz" in text
    assert "inter 250ms fall 2 rise 1" in text and "timeout check 2s" in text
    config = write_gateway(files, tmp_path)
    checked = subprocess.run([haproxy_binary(), "-c", "-f", str(config)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


def test_an_appliance_url_without_a_port_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match="lab-03"):
        backend("lab-03", "http://engine.lab", "http://127.0.0.1:8100")
