"""Shared fixtures: the real conf/ and models/, composed through the appliance's own code."""

from __future__ import annotations

import pytest

from appliance.compat.matrix import CompatibilityMatrix, load_matrix
from appliance.config.compose import compose_config
from appliance.config.schema import ComposedConfig


@pytest.fixture(scope="session")
def matrix() -> CompatibilityMatrix:
    return load_matrix()


@pytest.fixture(autouse=True)
def _isolated_appliance_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Tests never read the operator's site dir or host file, and write caches under tmp."""
    for name in ("APPLIANCE_SITE_DIR", "APPLIANCE_HOST_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("APPLIANCE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def compose(*overrides: str) -> ComposedConfig:
    return compose_config(list(overrides))
