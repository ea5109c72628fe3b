"""Planted secrets never reach an artefact: plans, renders, site listings, manifests, pilot reports; and
secrets held as files (a Kubernetes Secret volume) reach `serve` as the variables they are named after."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.helpers import Cli

SECRETS = {
    "HF_TOKEN": "hf_planted_hub_secret",
    "LAB_OPENAI_KEY": "sk-planted-api-key",
    "APPLIANCE_TOKEN": "planted-ctl",
}
SITE = ("site=lab-t3k", "+model=llama")


def run(cli: Cli, *args: str) -> str:
    done = cli(*args, env=SECRETS)
    return done.stdout + done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("plan", *SITE, "--json"),
        ("plan", *SITE),
        ("validate", *SITE, "--json"),
        ("plan", "--all-sites"),
        ("sites", "--json"),
        ("render", "systemd", *SITE),
        ("render", "k8s", *SITE),
        pytest.param(
            (
                "check",
                "mesh=cpu",
                "serving.api_key_env=LAB_OPENAI_KEY",
                "--json",
                "--releases",
                "build/vllm-releases.yaml",
            ),
            marks=pytest.mark.engine,  # the pilot checks run the engines' interpreters
        ),
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_no_command_prints_a_secret_value(cli: Cli, args: tuple[str, ...]) -> None:
    text = run(cli, *args)
    assert text.strip()
    assert not any(value in text for value in SECRETS.values()), text[-2000:]


@pytest.mark.engine  # `check` runs the engines' interpreters
def test_no_written_file_holds_a_secret_value(cli: Cli, tmp_path: Path) -> None:
    run(cli, "render", "k8s", *SITE, "--out", str(tmp_path / "k8s"))
    run(cli, "check", "mesh=cpu", "--report", str(tmp_path / "pilot.md"), "--releases", "build/vllm-releases.yaml")
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) >= 2
    for path in written:
        assert not any(value in path.read_text() for value in SECRETS.values()), path


def test_a_generated_control_token_file_is_0600(tmp_path: Path) -> None:
    from appliance.serve import control_token
    from testkit.helpers import cpu_plan

    token = control_token(cpu_plan(tmp_path), environ={})
    assert token.file is not None and token.file.stat().st_mode & 0o777 == 0o600
    assert token.value in token.file.read_text()


def test_serve_reads_the_secret_files_the_environment_lacks(tmp_path: Path) -> None:
    from appliance.preflight.launch import secrets_from_dir

    for name, value in [("APPLIANCE_TOKEN", "ctl\n"), ("HF_TOKEN", "hf_from_file"), ("not-a-variable", "x")]:
        (tmp_path / name).write_text(value)
    (tmp_path / "..data").mkdir()  # kubelet's own entries in a Secret volume
    environ = {"APPLIANCE_SECRETS_DIR": str(tmp_path), "HF_TOKEN": "hf_from_env"}
    assert secrets_from_dir(environ) == {"APPLIANCE_TOKEN": "ctl"}
    assert secrets_from_dir({"APPLIANCE_TOKEN": "x"}) == {}


def test_a_secrets_dir_that_is_not_there_is_a_config_error(tmp_path: Path) -> None:
    from appliance.errors import ConfigError
    from appliance.preflight.launch import secrets_from_dir

    with pytest.raises(ConfigError, match="APPLIANCE_SECRETS_DIR"):
        secrets_from_dir({"APPLIANCE_SECRETS_DIR": str(tmp_path / "missing")})
