"""One verdict before boot: every refusal `serve` makes before it binds or spawns, that needs no engine, is made by
`validate` and `plan` too, through the same code (preflight/launch.py), with the same code in its line. What only
the serving host can know is named by `validate` as host-only.

`serve` runs in-process here, as the console script would run it, and stops at its refusal: nothing binds, no
engine spawns (its state directory is the test's).
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testkit.helpers import Cli

Scenario = Callable[[Path], tuple[list[str], dict[str, str]]]


def _exposed_key(tmp: Path) -> tuple[list[str], dict[str, str]]:
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    cert.write_text("not read: the key's mode is judged first\n")
    key.write_text("a private key\n")
    key.chmod(0o644)
    return [f"control.tls.cert_file={cert}", f"control.tls.key_file={key}"], {}


def _missing_engine(tmp: Path) -> tuple[list[str], dict[str, str]]:
    return [f"engine.python={tmp / 'no-engine' / 'python'}"], {}


def _state_under_a_file(tmp: Path) -> tuple[list[str], dict[str, str]]:
    (tmp / "a-file").write_text("")
    return [f"paths.state_dir={tmp / 'a-file' / 'state'}"], {}


def _unset_api_key(tmp: Path) -> tuple[list[str], dict[str, str]]:
    return ["serving.api_key_env=ONE_VERDICT_UNSET_KEY"], {}


def _no_core_left(tmp: Path) -> tuple[list[str], dict[str, str]]:
    return [f"engine.host_share.reserve_cores={len(os.sched_getaffinity(0))}"], {}


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port another process listens on (this test's socket)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


SCENARIOS: dict[str, tuple[Scenario, str, str]] = {
    "a TLS key others can read": (_exposed_key, "tls-key-exposed", "control.tls.key_file"),
    "no engine interpreter": (_missing_engine, "engine-missing", "engine.python"),
    "a state directory under a file": (_state_under_a_file, "path-not-writable", "paths.state_dir"),
    "an API key variable that is not set": (_unset_api_key, "secret-missing", "serving.api_key_env"),
    "a reserve that leaves no core": (_no_core_left, "host-share-no-core", "engine.host_share.reserve_cores"),
}


def _first_error(stderr: str) -> str:
    return next(line for line in stderr.splitlines() if line.startswith("error["))


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_validate_and_plan_refuse_what_serve_refuses_with_the_same_code(cli: Cli, tmp_path: Path, name: str) -> None:
    scenario, code, key = SCENARIOS[name]
    overrides, env = scenario(tmp_path)
    state = [] if any(o.startswith("paths.state_dir=") for o in overrides) else [f"paths.state_dir={tmp_path}"]
    lines = {}
    for command in ("validate", "plan", "serve"):
        done = cli(command, *overrides, *state, env=env)
        assert done.returncode == 3 and "Traceback" not in done.stderr, (command, done)
        lines[command] = _first_error(done.stderr)
        assert "control API:" not in done.stdout
    assert {line.partition(": ")[0] for line in lines.values()} == {f"error[{code}] {key}"}, lines
    assert len(set(lines.values())) == 1, lines  # the same line: one piece of code said it


def test_a_port_another_process_holds_is_refused_by_each_with_a_free_one_to_use(
    cli: Cli, tmp_path: Path, held_port: int
) -> None:
    lines = []
    for command in ("validate", "plan", "serve"):
        done = cli(command, f"serving.port={held_port}", f"paths.state_dir={tmp_path}")
        assert done.returncode == 3, done
        lines.append(_first_error(done.stderr))
    assert len(set(lines)) == 1 and lines[0].startswith(f"error[port-in-use] serving.port: 127.0.0.1:{held_port} ")
    free = int(lines[0].rsplit("serving.port=", 1)[1])
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free))  # the port the fix names does bind


def test_validate_names_what_only_the_serving_host_can_judge(cli: Cli) -> None:
    """A TT config judged where no device is: exit 0, and the TT host's own checks are named, with `check`."""
    done = cli("validate", "+model=llama", "mesh=t3k")
    assert done.returncode == 0, done.stderr
    (host_only,) = [line for line in done.stdout.splitlines() if line.startswith("host-only")]
    assert "`appliance check +model=llama mesh=t3k`" in host_only
    assert "Tenstorrent devices" in host_only and "host.hugepages" in host_only
    serve = cli("serve", "--no-probe", "+model=llama", "mesh=t3k")
    assert serve.returncode == 3 and "engine=tt needs Tenstorrent devices" in serve.stderr


def test_the_host_only_names_are_the_host_checks_that_serve_runs() -> None:
    from appliance.compat.matrix import load_matrix
    from appliance.compat.validate import validate
    from appliance.config.compose import compose_config
    from appliance.host.discovery import discover_host
    from appliance.plan import build_plan
    from appliance.preflight.checks import host_checks
    from appliance.preflight.launch import HOST_CHECKS
    from appliance.preflight.results import HostCheckInput

    validated = validate(compose_config(["+model=llama", "mesh=t3k"]), load_matrix())
    ran = host_checks(HostCheckInput(validated, build_plan(validated), discover_host()))
    assert tuple(result.id for result in ran) == HOST_CHECKS


def test_a_port_a_dead_appliance_left_held_only_warns_as_its_engine_frees_it(
    cli: Cli, tmp_path: Path, held_port: int
) -> None:
    """What systemd's Restart= meets after a SIGKILL: the dead appliance's engine still stops on the port. The lock
    record names a pid that no longer runs: a warning, and serve would go on (tests/rollout/test_upgrade_fleet.py
    restarts a killed appliance so)."""
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / f"port-{held_port}.owner").write_text(f"pid {_exited_pid()}, site default, tiny\n")
    done = cli("validate", f"serving.port={held_port}", f"paths.state_dir={tmp_path}")
    assert done.returncode == 0, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"warning[port-in-use] serving.port: 127.0.0.1:{held_port} is still held, by what an ")


def _exited_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid
