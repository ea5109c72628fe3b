"""`appliance check` against the real CPU engine, on the session's read-only appliance (conftest).

The API check compares the live /openapi.json with the client contract under build/; the whole
report must stand on its own and carry no secret.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any, Protocol

import pytest

from appliance.preflight.api_contract import CONTRACT_FILE
from testkit.appliance_process import Served
from testkit.helpers import TINY, Cli, Ran

HF_SECRET = "hf_" + secrets.token_hex(12)


class Check(Protocol):
    def __call__(self, *args: str) -> Ran: ...


@pytest.fixture
def check(cli: Cli, shared_appliance: Served, ttnn_engine: Path) -> Check:
    """`appliance check` of the shared appliance's own config, with a planted HF token in the environment
    (its host checks count chips with the ttnn environment)."""
    env = {
        "APPLIANCE_TOKEN": shared_appliance.token,
        "HF_TOKEN": HF_SECRET,
        "APPLIANCE_CACHE_DIR": str(shared_appliance.cache),
    }
    port = shared_appliance.engine_url.rsplit(":", 1)[1]
    return lambda *args: cli("check", TINY, f"serving.port={port}", *args, env=env)


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["status"] for c in report["checks"]}


def test_the_running_cpu_engine_serves_the_recorded_client_contract(check: Check, shared_appliance: Served) -> None:
    done = check("--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    api = next(c for c in report["checks"] if c["id"] == "pilot.api")
    assert api["status"] == "pass", api
    assert api["evidence"]["engine"] == shared_appliance.engine_url and api["evidence"]["removed"] == []
    pilot = {k: v for k, v in statuses(report).items() if k.startswith("pilot.")}
    assert pilot == dict.fromkeys(
        ("pilot.cadence", "pilot.isolation", "pilot.pinning", "pilot.scheduler", "pilot.api"), "pass"
    )
    assert statuses(report)["engine.config"] == "pass"  # the engine's own config code accepts the plan as planned
    assert report["verdict"] == "pass" and report["summary"].startswith("READY (18 pass")


def test_a_contract_field_the_engine_no_longer_accepts_fails_the_api_check(check: Check, tmp_path: Path) -> None:
    contract = json.loads(CONTRACT_FILE.read_text())
    fields = contract["endpoints"]["POST /v1/completions"]["fields"]
    fields["best_of_legacy"] = {"type": ["integer"], "required": False}
    fields["max_tokens"]["type"] = ["string"]
    (tmp_path / "contract.json").write_text(json.dumps(contract))
    done = check("--json", "--contract", str(tmp_path / "contract.json"))
    assert done.returncode == 1
    api = next(c for c in json.loads(done.stdout)["checks"] if c["id"] == "pilot.api")
    assert api["status"] == "fail" and api["summary"].startswith("clients would break: 1 removed, 1 changed")
    assert api["evidence"]["removed"] == ["POST /v1/completions field `best_of_legacy`"]
    assert api["evidence"]["changed"] == ["POST /v1/completions field `max_tokens`: string -> integer|null"]


def test_the_markdown_report_stands_alone_and_holds_no_secret(
    check: Check, shared_appliance: Served, tmp_path: Path
) -> None:
    done = check("--report", str(tmp_path / "pilot.md"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(f"; report in {tmp_path / 'pilot.md'}")
    text = (tmp_path / "pilot.md").read_text()
    assert text.startswith("# Pilot report: appliance/tiny-llama on cpu (cpu engine)\n\n**Verdict: READY")
    for heading in (
        "## Host",
        "## Config and launch plan",
        "### Upstream cadence",
        "### Core isolation",
        "### Build pinning",
        "### Scheduler constraints",
        "### API compatibility",
    ):
        assert heading in text
    assert "-m vllm.entrypoints.openai.api_server" in text and "HF_TOKEN=$HF_TOKEN" in text
    assert HF_SECRET not in text + done.stdout and shared_appliance.token not in text + done.stdout


def test_the_recorded_contract_is_what_the_engine_serves_today(cli: Cli, shared_appliance: Served) -> None:
    done = cli("api-contract", "--engine-url", shared_appliance.engine_url)
    assert done.returncode == 0, done.stderr
    live, recorded = json.loads(done.stdout), json.loads(CONTRACT_FILE.read_text())
    assert live["endpoints"] == recorded["endpoints"] and live["source"].startswith("vLLM 0.32.0 at")
