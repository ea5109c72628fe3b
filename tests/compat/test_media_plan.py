"""The media policy in the config, the plan and the verdict (issue 54): what a vision plan lets its engine fetch, the
flags and variables it owns, and the refusals of what would loosen it, through the real CLI where an operator sees
them."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.compat.matrix import load_matrix
from appliance.compat.validate import validate
from appliance.config.compose import compose_config
from appliance.errors import ConfigError
from appliance.plan import build_plan
from appliance.preflight.launch import launch_checks
from appliance.runtime.spawn import engine_environment
from testkit.helpers import Cli, cpu_plan

TT_VISION = ("+model=qwen", "mesh=n300", "model.checkpoint=Qwen/Qwen2.5-VL-7B-Instruct")


def test_a_vision_plan_fetches_nothing_remote_by_default(tmp_path: Path) -> None:
    plan = cpu_plan(tmp_path, model="tiny_vl")
    argv = plan.argv
    assert "--allowed-media-domains" not in argv  # an empty list would mean "any host" to vLLM
    assert argv[argv.index("--allowed-local-media-path") + 1] == f"{tmp_path}/state/no-local-media"
    assert plan.env["VLLM_MEDIA_URL_ALLOW_REDIRECTS"] == "0"
    # 200704 px (the plan's cap) as RGBA is 0.77 MiB, plus 1 MiB of headers: 2 MB, not vLLM's 256.
    assert plan.env["VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB"] == "2"
    assert plan.media is not None and plan.media.line() == (
        "media: inline data: URLs; remote URLs refused (serving.allowed_media_domains is empty); no local files; "
        "at most 2 MB per image"
    )
    assert plan.expected["allowed_media_domains"] is None


def test_the_engine_fetches_only_through_its_gate_whatever_the_operators_proxy_settings(tmp_path: Path) -> None:
    plan = cpu_plan(tmp_path, model="tiny_vl")
    operator = {
        "NO_PROXY": "127.0.0.1,localhost",
        "HTTP_PROXY": "http://corp:3128",
        f"APPLIANCE_MEDIA_GATE_{plan.port}": "http://127.0.0.1:41000",
    }
    env = engine_environment(plan, operator)
    assert {env[k] for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")} == {"http://127.0.0.1:41000"}
    assert env["NO_PROXY"] == env["no_proxy"] == ""
    assert engine_environment(plan, {})["http_proxy"] == "http://127.0.0.1:9"  # a probe: no gate, nothing fetched
    assert "http_proxy" not in engine_environment(cpu_plan(tmp_path), {})  # a text model fetches no media


def test_listed_hosts_redirects_and_a_local_folder_reach_the_engine(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    plan = cpu_plan(
        tmp_path,
        "serving.allowed_media_domains=[images.example.org,10.1.2.3]",
        "serving.media_redirects=true",
        f"serving.local_media_dir={folder}",
        model="tiny_vl",
    )
    argv = list(plan.argv)
    at = argv.index("--allowed-media-domains")
    assert argv[at + 1 : at + 3] == ["images.example.org", "10.1.2.3"]
    assert argv[argv.index("--allowed-local-media-path") + 1] == str(folder)
    assert plan.env["VLLM_MEDIA_URL_ALLOW_REDIRECTS"] == "1"
    assert plan.expected["allowed_media_domains"] == ["images.example.org", "10.1.2.3"]
    assert [p.code for p in launch_checks(plan, {}, devices=False).errors] == ["media-dir-missing"]
    folder.mkdir()
    assert launch_checks(plan, {}, devices=False).errors == ()


def test_the_tt_plan_carries_the_same_policy_with_what_vllm_0_26_reads() -> None:
    """vLLM 0.26.0 has the host list, the local folder and the redirect switch, but no download cap: the gate's is
    the only one there, and the plan passes nothing the state records as unread."""
    plan = build_plan(validate(compose_config(list(TT_VISION)), load_matrix()))
    assert "--allowed-local-media-path" in plan.argv and plan.env["VLLM_MEDIA_URL_ALLOW_REDIRECTS"] == "0"
    assert "VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB" not in plan.env and "max_media_download_size_mb" not in plan.expected
    assert plan.media is not None and not plan.media.engine_caps and plan.media.max_download_mb == 50
    assert not [w for w in plan.warnings if w.code in ("flag-not-read", "env-not-read")]


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("engine.extra_args=[--allowed-media-domains,evil.example]", "engine.extra_args"),
        ("engine.extra_args=[--allowed-local-media-path,/]", "engine.extra_args"),
        ("engine.env.VLLM_MEDIA_URL_ALLOW_REDIRECTS=1", "engine.env.VLLM_MEDIA_URL_ALLOW_REDIRECTS"),
        ("engine.env.NO_PROXY=127.0.0.1", "engine.env.NO_PROXY"),
        ("engine.env.HTTPS_PROXY=http://127.0.0.1:1", "engine.env.HTTPS_PROXY"),
    ],
)
def test_what_would_loosen_the_policy_is_refused_naming_the_key_that_owns_it(override: str, key: str) -> None:
    with pytest.raises(ConfigError) as refused:
        validate(compose_config(["mesh=cpu", "engine=cpu", "model=tiny_vl", override]), load_matrix())
    (problem,) = refused.value.problems
    assert problem.key == key and "serving." in problem.message


@pytest.mark.parametrize(
    "entry",
    [
        "http://images.example.org",
        "images.example.org:8080",
        "*.example.org",
        "Images.Example.org",
        "images.example.org/cat.png",
        "",
    ],
)
def test_an_allow_list_entry_that_is_not_a_host_name_is_one_line_and_exit_2(cli: Cli, entry: str) -> None:
    ran = cli("validate", "model=tiny_vl", f"serving.allowed_media_domains=[{entry!r}]")
    lines = ran.stderr.strip().splitlines()
    assert ran.returncode == 2 and len(lines) == 1 and "serving.allowed_media_domains" in lines[0], ran.stderr


def test_plan_shows_the_policy(cli: Cli) -> None:
    ran = cli("plan", "model=tiny_vl", "serving.allowed_media_domains=[images.example.org]")
    assert ran.returncode == 0
    assert (
        "# media: inline data: URLs; remote URLs from images.example.org only, through the appliance's media gate, "
        "no redirects; no local files; at most 2 MB per image"
    ) in ran.stdout


SHIPPED = [
    ("mesh=cpu", "engine=cpu", "model=tiny_vl"),
    ("mesh=cpu", "engine=cpu", "model=smollm2"),
    ("mesh=cpu", "engine=cpu", "model=tiny", "engine.scheduler=phased"),
    ("+model=llama", "mesh=t3k"),
    TT_VISION,
]


@pytest.mark.parametrize("config", SHIPPED, ids=lambda c: " ".join(c))
def test_extra_args_may_repeat_no_flag_the_plan_emits(config: tuple[str, ...]) -> None:
    """vLLM takes a repeated flag's last value: an extra_args repeat would launch otherwise than the plan says."""
    matrix = load_matrix()
    validated = validate(compose_config(list(config)), matrix)
    own = build_plan(validated).argv[: -len(validated.extra_args) or None]  # the config's own extra_args follow
    emitted = [a for a in own if a.startswith("--")]
    assert emitted
    for flag in emitted:
        with pytest.raises(ConfigError) as refused:
            build_plan(validate(compose_config([*config, f"engine.extra_args=[{flag},'1']"]), matrix))
        assert any(p.key == "engine.extra_args" and flag in p.message for p in refused.value.problems), flag
