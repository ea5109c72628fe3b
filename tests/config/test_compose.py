from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config.compose import GROUPS, compose_config, group_options
from appliance.errors import ConfigError


@pytest.mark.parametrize(("group", "option"), [(g, o) for g in GROUPS for o in group_options(g)])
def test_every_option_of_every_group_composes(group: str, option: str) -> None:
    composed = compose_config([f"{group}={option}"])
    assert composed.choices[group] == option


def test_plus_model_is_an_alias_that_keeps_site_values_on_top() -> None:
    composed = compose_config(["+model=qwen", "site=lab-t3k"])
    assert composed.choices["model"] == "qwen"
    # the site sets model.checkpoint; a model file selected with +model= must not override it
    assert composed.config.model.checkpoint == "meta-llama/Llama-3.3-70B-Instruct"
    assert composed.provenance["model.checkpoint"] == "conf/site/lab-t3k.yaml"


def test_precedence_is_defaults_then_site_then_host_then_command_line(tmp_path: Path) -> None:
    host = tmp_path / "host.yaml"
    host.write_text("# @package _global_\nserving:\n  max_concurrency: 16\n  port: 9000\n")
    composed = compose_config(["site=lab-t3k", "serving.port=9100"], host_file=host)
    cfg = composed.config
    assert cfg.serving.max_context == 32768  # site over package default
    assert cfg.serving.max_concurrency == 16  # host-local over site
    assert cfg.serving.port == 9100  # command line over host-local
    assert composed.provenance["serving.max_context"] == "conf/site/lab-t3k.yaml"
    assert composed.provenance["serving.max_concurrency"] == str(host.resolve())
    assert composed.provenance["serving.port"] == "command line"
    assert composed.provenance["control.port"] == "conf/config.yaml"


def test_an_external_site_dir_adds_sites(tmp_path: Path) -> None:
    (tmp_path / "rack7.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /mesh: n300\nsite:\n  name: rack7\n  min_status: complete\n"
    )
    composed = compose_config(["site=rack7", "+model=llama"], site_dir=tmp_path)
    assert composed.config.site.name == "rack7"
    assert composed.config.mesh.option == "n300"
    assert "rack7" in group_options("site", tmp_path)


@pytest.mark.parametrize(
    ("overrides", "code", "key"),
    [
        (["serving.max_context=lots"], "bad-type", "serving.max_context"),
        (["++model.bogus=1"], "unknown-key", "model.bogus"),
        (["+servng.port=1"], "unknown-key", "servng"),
        (["model=nope"], "unknown-option", "model"),
        (["site=nowhere"], "unknown-option", "site"),
        (["serving.port=="], "bad-override", "overrides"),
        (["features.prefix_caching=maybe"], "bad-type", "features.prefix_caching"),
    ],
)
def test_a_bad_override_is_one_problem_naming_the_key(overrides: list[str], code: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        compose_config(overrides)
    (problem,) = caught.value.problems
    assert (problem.code, problem.key) == (code, key)
    assert "\n" not in problem.render()


def test_a_yaml_error_in_a_site_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("# @package _global_\nserving: [unclosed\n")
    with pytest.raises(ConfigError, match="broken.yaml"):
        compose_config(["site=broken"], site_dir=tmp_path)


def test_a_missing_site_dir_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="site-dir-missing"):
        compose_config([], site_dir=tmp_path / "absent")


def test_tt_keys_need_no_plus_prefix() -> None:
    composed = compose_config(["tt.trace_mode=none", "engine.env.TT_MM_THROTTLE_PERF=5"])
    assert composed.config.tt == {"trace_mode": "none"}
    assert composed.config.engine.env["TT_MM_THROTTLE_PERF"] == "5"


def test_equal_configs_hash_equally_and_different_ones_do_not() -> None:
    a = compose_config(["mesh=t3k", "+model=llama"])
    b = compose_config(["+model=llama", "mesh=t3k"])
    c = compose_config(["+model=llama", "mesh=n300"])
    assert a.config_hash == b.config_hash != c.config_hash
