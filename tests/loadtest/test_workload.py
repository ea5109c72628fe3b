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
        workload(
            "mixed",
            "workload.rate_per_s=0",
            "workload.logprobs_share=1.5",
            "workload.prompt_tokens.min=900",
            "workload.prompt_tokens.max=800",
        )
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


IMAGES = (
    "workload.images.share=0.4",
    "workload.images.reuse_share=0.3",
    "workload.images.per_request=[{count:1,weight:3},{count:2,weight:1}]",
    "workload.images.sizes=[{width:224,height:224,weight:3},{width:56,height:40,weight:1}]",
)


def test_image_shares_counts_and_sizes_follow_the_workload() -> None:
    planned = plan_requests(workload("mixed", *IMAGES), 4000)
    with_images = [r for r in planned if r.images]
    assert len(with_images) / 4000 == pytest.approx(0.4, abs=0.03)
    assert sum(len(r.images) == 2 for r in with_images) / len(with_images) == pytest.approx(0.25, abs=0.03)
    new = [i for r in with_images for i in r.images if not i.reused]
    assert {i.size for i in new} == {(224, 224), (56, 40)}
    assert sum(i.size == (56, 40) for i in new) / len(new) == pytest.approx(0.25, abs=0.03)
    images = [i for r in with_images for i in r.images]
    assert sum(i.reused for i in images) / len(images) == pytest.approx(0.3, abs=0.03)


def test_a_reused_image_is_one_an_earlier_request_sent_and_new_images_have_new_keys() -> None:
    seen: dict[int, tuple[int, int]] = {}
    for request in plan_requests(workload("mixed", *IMAGES), 500):
        for image in request.images:
            if image.reused:
                assert seen[image.key] == image.size
        fresh = [i.key for i in request.images if not i.reused]
        assert len(set(fresh)) == len(fresh) and not seen.keys() & set(fresh)
        seen |= {i.key: i.size for i in request.images}


def test_image_requests_use_the_chat_api_and_move_no_arrival_length_or_text_api() -> None:
    w = workload("mixed")
    base, other = plan_requests(w, 300), plan_requests(workload("mixed", *IMAGES), 300)
    assert all(r.api == "chat" for r in other if r.images)
    assert [(r.at_s, r.prompt_tokens, r.output_tokens) for r in base] == [
        (r.at_s, r.prompt_tokens, r.output_tokens) for r in other
    ]
    assert all(a.api == b.api for a, b in zip(base, other, strict=True) if not b.images)
    assert plan_requests(workload("mixed", *IMAGES), 300) == other


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("workload.images.share=1.5", "workload.images.share"),
        ("workload.images.reuse_share=-0.1", "workload.images.reuse_share"),
        ("workload.images.sizes=[]", "workload.images.sizes"),
        ("workload.images.per_request=[]", "workload.images.per_request"),
        ("workload.images.sizes=[{width:5000,height:10}]", "workload.images.sizes.0.width"),
        ("workload.images.per_request=[{count:0}]", "workload.images.per_request.0.count"),
        ("workload.images.per_request=[{count:1,weight:0}]", "workload.images.per_request.0.weight"),
        ("workload.images.format=gif", "workload.images.format"),
        ("+workload.images.share_of_reuse=1", "workload.images.share_of_reuse"),
    ],
)
def test_unusable_image_values_are_one_problem_naming_their_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        workload("vision", override)
    (problem,) = caught.value.problems
    assert problem.key == key and "\n" not in problem.render()


def test_images_count_against_the_servers_context_as_the_server_counts_them() -> None:
    w = workload("vision")  # prompts up to 256, answers up to 192, two images a request
    assert check_workload(w, max_model_len=900) == []  # a server that cannot count images refuses them itself
    (problem,) = check_workload(w, max_model_len=900, image_tokens={(224, 224): 66, (448, 448): 258})
    assert "964 prompt+output tokens (images 516)" in problem.message and "workload.images" in problem.fix


def test_an_image_request_body_puts_the_images_before_the_text_in_one_user_message() -> None:
    planned = next(r for r in plan_requests(workload("vision"), 20) if len(r.images) == 2)
    prompt = BuiltPrompt(planned.index, "describe", 5, False, ("data:image/png;base64,AA", "data:image/png;base64,BB"))
    path, body = request_body("m", planned, prompt)
    assert path == "/v1/chat/completions"
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,BB"}},
                {"type": "text", "text": "describe"},
            ],
        }
    ]
