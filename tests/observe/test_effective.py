"""Requested versus effective capabilities: the plan's side, and what the engine itself says it runs.

The CPU cases read a real boot of the CPU engine (testkit/data/vllm-cpu-effective.log, recorded) and the
boot of the engine tier's restartable appliance, which runs with the same capabilities. The TT case reads
lines built from the plugin's own format strings (testkit/data/tt-plugin-log-lines.txt; no TT device
exists here, see its header).
"""

from __future__ import annotations

from pathlib import Path

from appliance.compat.matrix import CompatibilityMatrix
from appliance.compat.validate import validate
from appliance.config.compose import compose_config
from appliance.control.documents import CapabilitiesDocument
from appliance.observe.effective import Capabilities, differences, effective, requested, with_metrics
from appliance.plan import build_plan
from testkit.appliance_process import CAPABILITY_OVERRIDES, RESTARTABLE_EXTRA, Served
from testkit.helpers import cpu_plan
from testkit.paths import DATA

TT_OVERRIDES = (
    "+model=llama",
    "mesh=t3k",
    "model.checkpoint=meta-llama/Llama-3.3-70B-Instruct",
    "serving.max_context=65536",
    "features.prefix_caching=true",
    "features.async_decode=true",
    "features.strict=false",
    "engine.env.VLLM_RPC_TIMEOUT='100000'",
)


def by_code(problems: tuple[object, ...]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for p in problems:
        found.setdefault(p.code, set()).add(p.key)  # type: ignore[attr-defined]
    return found


def test_the_requested_side_is_read_from_the_plan(tmp_path: Path) -> None:
    want = requested(cpu_plan(tmp_path, *CAPABILITY_OVERRIDES))
    assert (want.prefix_caching, want.chunked_prefill, want.async_scheduling) == (True, False, False)
    assert (want.max_model_len, want.max_num_seqs, want.max_num_batched_tokens) == (2048, 16, 2048)
    assert want.kv_cache_memory_bytes == 268435456 and want.speculative == "off"
    assert "VLLM_RPC_TIMEOUT" in want.set_env and want.compact_json is None


def test_the_recorded_cpu_boot_shows_what_the_engine_ignored(tmp_path: Path) -> None:
    got = effective(
        (DATA / "vllm-cpu-effective.log").read_text().splitlines(),
        (DATA / "vllm-cpu-effective-metrics.txt").read_text(),
    )
    assert (got.prefix_caching, got.chunked_prefill, got.max_model_len, got.compact_json) == (True, False, 2048, False)
    assert got.kv_cache_memory_bytes == 1 << 30 and got.ignored_env == ("VLLM_RPC_TIMEOUT",)
    assert got.sources["kv_cache_memory_bytes"].startswith("/metrics vllm:cache_config_info")
    assert got.async_scheduling is None  # the CPU platform turns it off without logging it: unknown, not no
    found = by_code(differences(requested(cpu_plan(tmp_path, *CAPABILITY_OVERRIDES)), got))
    assert found == {"capability-differs": {"kv_cache_memory_bytes"}, "env-not-read": {"engine.env.VLLM_RPC_TIMEOUT"}}


def test_a_metrics_page_that_comes_after_the_boot_adds_to_what_the_log_said() -> None:
    lines = (DATA / "vllm-cpu-effective.log").read_text().splitlines()
    page = (DATA / "vllm-cpu-effective-metrics.txt").read_text()
    from_log = effective(lines)
    assert from_log.kv_cache_memory_bytes is None and from_log.max_model_len == 2048
    assert with_metrics(from_log, page) == effective(lines, page)  # as if both were read at once


def test_the_plugins_warnings_on_tt_become_differences(matrix: CompatibilityMatrix) -> None:
    plan = build_plan(validate(compose_config(list(TT_OVERRIDES)), matrix))
    want = requested(plan)
    got = effective((DATA / "tt-plugin-log-lines.txt").read_text().splitlines())
    assert (got.prefix_caching, got.async_scheduling, got.chunked_prefill) == (False, False, False)
    assert got.max_num_batched_tokens == 65536 and got.compact_json is True
    found = by_code(differences(want, got))
    assert found["capability-differs"] == {"prefix_caching", "async_scheduling"}
    assert "engine.env.VLLM_RPC_TIMEOUT" in found["env-not-read"]
    assert want.compact_json is True  # the plan lists the plugin's forced compact JSON, so it is no surprise


def test_nothing_either_side_leaves_unsaid_is_a_difference() -> None:
    assert differences(Capabilities(prefix_caching=True), Capabilities()) == ()
    assert differences(Capabilities(), Capabilities(prefix_caching=False)) == ()


def test_the_real_cpu_engine_reports_what_it_runs_against_the_plan(
    restartable_appliance: Served, tmp_path: Path
) -> None:
    with restartable_appliance.api() as api:
        page = api.engine_metrics()
    got = effective(restartable_appliance.boot_log.splitlines(), page)
    assert (got.prefix_caching, got.chunked_prefill, got.max_model_len) == (True, False, 2048)
    found = by_code(differences(requested(cpu_plan(tmp_path, *RESTARTABLE_EXTRA)), got))
    assert found == {"capability-differs": {"kv_cache_memory_bytes"}, "env-not-read": {"engine.env.VLLM_RPC_TIMEOUT"}}


def test_as_planned_is_said_only_of_capabilities_both_sides_state() -> None:
    asked = {"prefix_caching": True, "max_model_len": 2048, "compact_json": None}
    assert CapabilitiesDocument(asked, None).verdict() == (
        "capabilities: not checked yet (read from the engine once it has been ready)",
    )
    silent = CapabilitiesDocument(asked, {"prefix_caching": None, "max_model_len": None, "compact_json": True})
    assert silent.verdict() == ("capabilities: not checked (the engine stated none of the planned ones)",)
    same = CapabilitiesDocument(asked, {"prefix_caching": True, "max_model_len": 2048, "compact_json": True})
    assert same.verdict() == ("capabilities: as planned (2 compared: max_model_len, prefix_caching)",)


def test_each_difference_from_the_plan_is_its_own_line(tmp_path: Path) -> None:
    got = effective(
        (DATA / "vllm-cpu-effective.log").read_text().splitlines(),
        (DATA / "vllm-cpu-effective-metrics.txt").read_text(),
    )
    found = differences(requested(cpu_plan(tmp_path, *CAPABILITY_OVERRIDES)), got)
    document = CapabilitiesDocument({}, {}, differences=tuple(p.message for p in found))
    assert document.verdict() == tuple(f"differs from the plan: {p.message}" for p in found) and len(found) == 2
