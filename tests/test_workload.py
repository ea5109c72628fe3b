"""Workload files, the request plan drawn from them, and the checks that refuse unusable values."""

from __future__ import annotations

import random
import statistics
from dataclasses import replace

import pytest

from appliance.config.compose import compose_config, group_options
from appliance.config.schema import LengthDistribution, WorkloadConfig
from appliance.errors import ConfigError
from appliance.loadtest.generator import JSON_SCHEMA, request_body
from appliance.loadtest.prompts import BuiltPrompt
from appliance.loadtest.workload import check_workload, draw_length, plan_requests

WORKLOADS = group_options("workload")


def workload(name: str, *overrides: str) -> WorkloadConfig:
    return compose_config([f"workload={name}", *overrides]).config.workload


def test_the_issue_names_four_workloads_and_a_stall_probe_ships_too() -> None:
    assert {"chat", "long-prompt", "structured", "mixed", "stall-probe"} <= set(WORKLOADS)


@pytest.mark.parametrize("name", WORKLOADS)
def test_every_workload_composes_and_passes_its_checks(name: str) -> None:
    w = workload(name)
    assert w.name == name
    assert check_workload(w, max_model_len=2048) == []
    planned = plan_requests(w, w.max_requests)
    assert len(planned) == w.max_requests
    assert all(r.prompt_tokens + r.output_tokens <= 2048 for r in planned)


def test_the_same_seed_replays_the_same_arrivals_lengths_and_features() -> None:
    w = workload("mixed")
    assert plan_requests(w, 100) == plan_requests(w, 100)
    assert plan_requests(replace(w, seed=5), 100) != plan_requests(w, 100)


def test_changing_one_share_moves_no_arrival_or_length() -> None:
    w = workload("mixed")
    base, other = plan_requests(w, 100), plan_requests(replace(w, logprobs_share=0.9), 100)
    assert [(r.at_s, r.prompt_tokens, r.output_tokens, r.api) for r in base] == [
        (r.at_s, r.prompt_tokens, r.output_tokens, r.api) for r in other
    ]
    assert sum(r.logprobs for r in other) > sum(r.logprobs for r in base)


def test_poisson_arrivals_have_the_configured_rate_and_a_closed_loop_has_none() -> None:
    planned = plan_requests(workload("mixed", "workload.rate_per_s=4"), 4000)
    gaps = [b.at_s - a.at_s for a, b in zip(planned, planned[1:], strict=False)]
    assert statistics.mean(gaps) == pytest.approx(0.25, rel=0.05)
    assert all(r.at_s is None for r in plan_requests(workload("chat"), 10))


def test_shares_of_features_follow_the_workload() -> None:
    planned = plan_requests(workload("mixed"), 4000)
    assert sum(r.api == "chat" for r in planned) / 4000 == pytest.approx(0.7, abs=0.03)
    assert sum(r.structured for r in planned) / 4000 == pytest.approx(0.1, abs=0.02)
    assert sum(r.shared_prefix for r in planned) / 4000 == pytest.approx(0.3, abs=0.03)


@pytest.mark.parametrize("kind", ["fixed", "uniform", "normal", "lognormal"])
def test_lengths_stay_within_their_clamps_around_the_mean(kind: str) -> None:
    dist = LengthDistribution(kind=kind, mean=200, std=80, min=50, max=400)
    rng = random.Random(1)
    values = [draw_length(dist, rng) for _ in range(5000)]
    assert min(values) >= 50 and max(values) <= 400
    assert statistics.mean(values) == pytest.approx(200 if kind != "uniform" else 225, rel=0.06)


def test_unusable_values_are_refused_with_their_keys_when_the_config_is_parsed() -> None:
    with pytest.raises(ConfigError) as caught:
        workload("mixed", "workload.rate_per_s=0", "workload.logprobs_share=1.5", "workload.prompt_tokens.min=900",
                 "workload.prompt_tokens.max=800")  # fmt: skip
    assert {p.key for p in caught.value.problems} == {"workload.rate_per_s", "workload.logprobs_share"}
    with pytest.raises(ConfigError, match=r"workload.prompt_tokens.min: 900 is above workload.prompt_tokens.max"):
        workload("mixed", "workload.prompt_tokens.min=900", "workload.prompt_tokens.max=800")
    with pytest.raises(ConfigError, match="workload.concurrency"):
        workload("chat", "workload.concurrency=0")


def test_a_workload_longer_than_the_servers_context_is_refused() -> None:
    (problem,) = check_workload(workload("long-prompt"), max_model_len=512)
    assert problem.code == "workload-too-long" and "764" in problem.message


def test_a_misspelt_workload_key_is_one_config_error() -> None:
    with pytest.raises(ConfigError, match="workload.rate_per_sec"):
        compose_config(["workload=mixed", "+workload.rate_per_sec=3"])


def test_request_bodies_carry_the_planned_features() -> None:
    planned = plan_requests(workload("mixed"), 1)[0]
    prompt = BuiltPrompt(0, "hello", 5, False)
    path, body = request_body("m", replace(planned, api="chat", structured=True, logprobs=True, penalties=True), prompt)
    assert path == "/v1/chat/completions" and body["messages"] == [{"role": "user", "content": "hello"}]
    assert body["response_format"]["json_schema"]["schema"] == JSON_SCHEMA and body["ignore_eos"] is False
    assert body["top_logprobs"] == 5 and body["presence_penalty"] > 0 and body["repetition_penalty"] > 1
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    path, body = request_body("m", replace(planned, api="completion", structured=False, logprobs=True), prompt)
    assert path == "/v1/completions" and body["prompt"] == "hello" and body["logprobs"] == 5
    assert body["ignore_eos"] is True and body["max_tokens"] == planned.output_tokens
