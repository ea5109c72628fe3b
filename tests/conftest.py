"""Shared fixtures: the real conf/ and models/ composed through the appliance's own code, the engine
gate, the engine tier's shared appliances, and the command line run in-process.

The engine gate: a test belongs to the engine tier when it uses the `cpu_engine` or `ttnn_engine`
fixture, directly or through `shared_appliance`, `restartable_appliance`, `vision_appliance` or `sigtermed`, or is
marked `engine` by hand (a command that runs an engine's interpreter). It gets the `engine` marker, so
`-m "not engine"` is the fast tier, and is skipped, with one reason, where the environment it needs
is not built.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

from appliance.compat.matrix import CompatibilityMatrix, load_matrix
from testkit.appliance_process import (
    API_KEY,
    KEY_ENV,
    READ_ONLY_EXTRA,
    RESTARTABLE_EXTRA,
    ROOT,
    VISION_EXTRA,
    Served,
    revive,
    running_appliance,
)
from testkit.helpers import PROFILE, Cli, run_cli
from testkit.sigterm_scenario import SigtermRun, sigterm_under_load

# `make test` (CI) loads "ci"; a plain `pytest` and `make test-fast` explore with the "dev" count.
settings.register_profile("ci", max_examples=1000, deadline=None)
settings.register_profile("dev", max_examples=120, deadline=None)
settings.load_profile(PROFILE)


@dataclass(frozen=True)
class EngineGate:
    """A fixture that needs a built engine environment, and what to say where it is missing."""

    fixture: str
    stamp: Path
    reason: str


CPU_GATE = EngineGate(
    "cpu_engine",
    ROOT / ".engines" / "cpu" / ".appliance-engine-ok",
    "the CPU engine environment is not built (make engine-cpu)",
)
TTNN_GATE = EngineGate(
    "ttnn_engine",
    ROOT / ".engines" / "ttnn" / ".appliance-engine-ok",
    "the ttnn environment is not built (make engine-ttnn)",
)


SHARED = {
    "shared_appliance": "appliance pair",
    "restartable_appliance": "appliance pair",
    "sigtermed": "sigtermed",
    "vision_appliance": "vision",
}
"""The session's shared appliances and their xdist groups: under pytest-xdist (`--dist loadgroup`)
the tests of a group run on one worker, so each appliance is booted once, not once per worker. The
read-only and the restartable appliance form one group: the gateway test stands them side by side."""


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker, and before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark and gate every test that uses an engine fixture, however indirectly, or is marked `engine`;
    group the tests of each shared appliance."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if group := next((SHARED[f] for f in SHARED if f in fixtures), None):
            item.add_marker(pytest.mark.xdist_group(group))
        gates = [g for g in (CPU_GATE, TTNN_GATE) if g.fixture in fixtures]
        if not gates and item.get_closest_marker("engine"):
            gates = [CPU_GATE]
        if gates:
            item.add_marker(pytest.mark.engine)
        missing = [g.reason for g in gates if not g.stamp.is_file()]
        if missing:
            item.add_marker(pytest.mark.skip(reason=missing[0]))


@pytest.fixture(scope="session")
def cpu_engine() -> Path:
    """The CPU engine's interpreter (`.engines/cpu`, vLLM 0.32.0)."""
    return ROOT / ".engines" / "cpu" / "bin" / "python"


@pytest.fixture(scope="session")
def ttnn_engine() -> Path:
    """The ttnn probe's interpreter (`.engines/ttnn`, Python 3.12)."""
    return ROOT / ".engines" / "ttnn" / "bin" / "python"


@pytest.fixture(scope="session")
def matrix() -> CompatibilityMatrix:
    return load_matrix()


@pytest.fixture(autouse=True)
def _isolated_appliance_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Tests never read the operator's site dir or host file, and write caches under tmp."""
    for name in ("APPLIANCE_SITE_DIR", "APPLIANCE_HOST_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("APPLIANCE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture
def cli(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """`appliance ARGS...` in this process: exit code, stdout and stderr (logging and child processes'
    output included), as a subprocess would give them; `env=` sets variables for the rest of the test."""
    return lambda *args, env=None: run_cli(capfd, monkeypatch, args, env or {})


@pytest.fixture(scope="session")
def shared_appliance(cpu_engine: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One `appliance serve` for every read-only engine test: never drained, restarted or killed."""
    tmp = tmp_path_factory.mktemp("shared")
    workdir = tmp / "operator"
    workdir.mkdir()
    (workdir / "re.py").write_text('raise ImportError("the stray re.py in the working directory was imported")\n')
    with running_appliance(tmp, *READ_ONLY_EXTRA, cwd=workdir) as served:
        yield served


@pytest.fixture(scope="session")
def vision_appliance(cpu_engine: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One `appliance serve model=tiny_vl` (the embedded vision model, built by serve's own recipe step) for
    every test that sends images: read-only, like `shared_appliance`."""
    tmp = tmp_path_factory.mktemp("vision")
    with running_appliance(tmp, *VISION_EXTRA, model="tiny_vl") as served:
        yield served


@pytest.fixture(scope="session")
def _restartable_session(cpu_engine: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("restartable")
    with running_appliance(tmp, *RESTARTABLE_EXTRA, env={KEY_ENV: API_KEY}) as served:
        yield served


@pytest.fixture
def restartable_appliance(_restartable_session: Served) -> Iterator[Served]:
    """The appliance destructive tests drain, restart and crash (its engine port takes `API_KEY`);
    ready when each test starts and made ready again when it ends, so tests run alone and in any order."""
    revive(_restartable_session)
    yield _restartable_session
    revive(_restartable_session)


@pytest.fixture(scope="session")
def sigtermed(cpu_engine: Path, tmp_path_factory: pytest.TempPathFactory) -> SigtermRun:
    """An appliance of its own, stopped by SIGTERM with 50 requests in flight (testkit/sigterm_scenario.py)."""
    return sigterm_under_load(tmp_path_factory.mktemp("sigterm"))
