"""Group choices before composing, and `auto` resolved with one composition.

The fast path (reading the option files when none has a defaults list) is checked against Hydra's
own defaults list for the same selections; resolution is checked against composing the options typed
out, which is what it promises to equal (same config hash, same provenance).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.compat.matrix import load_matrix
from appliance.compat.resolve import resolve_config
from appliance.config.choices import group_choices
from appliance.config.compose import compose_config, composition_inputs, defaults_choices, group_selections
from appliance.host.discovery import discover_host
from testkit.paths import DATA

HOSTS = DATA / "hosts"

SELECTIONS = [
    (),
    ("+model=llama", "mesh=n150"),
    ("model=qwen", "mesh=t3k", "engine=tt", "precision=accuracy"),
    ("+model=llama", "site=lab-t3k"),
    ("+model=llama", "site=edge-n150", "mesh=n300"),
    ("workload=mixed", "engine=cpu"),
]


@pytest.mark.parametrize("selections", SELECTIONS, ids=lambda s: " ".join(s) or "defaults")
def test_group_choices_match_hydras_defaults_list(selections: tuple[str, ...]) -> None:
    hydra = defaults_choices(*composition_inputs(selections, None, None))
    assert group_choices(selections) == hydra


def test_group_choices_follow_a_site_dir_that_overrides_the_mesh(tmp_path: Path) -> None:
    (tmp_path / "rack.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /mesh: t3k\nsite:\n  name: rack\n"
    )
    choices = group_choices(["site=rack"], site_dir=tmp_path)
    assert choices["mesh"] == "t3k" and choices == defaults_choices(("site=rack",), tmp_path, None)


@pytest.mark.parametrize(
    ("overrides", "typed"),
    [
        (["+model=llama", "mesh=n150", "serving.max_context=131072"], ["engine=tt"]),
        (["+model=llama", "site=lab-t3k", "serving.port=8001"], ["engine=tt"]),
        (["+model=tiny", "~engine.env.VLLM_CPU_KVCACHE_SPACE"], ["mesh=cpu", "engine=cpu"]),
        (["+model=llama", "mesh=t3k", "engine=tt"], []),
    ],
)
def test_resolving_auto_equals_composing_the_options_typed_out(
    overrides: list[str], typed: list[str], tmp_path: Path
) -> None:
    """On a host without boards (an empty recorded tree): mesh=auto is cpu."""
    resolved = resolve_config(overrides, load_matrix(), lambda: discover_host(tmp_path))
    expected = compose_config([*overrides, *typed])
    assert resolved.config_hash == expected.config_hash
    assert resolved.provenance == expected.provenance and resolved.choices == expected.choices


def test_mesh_auto_follows_the_hosts_boards() -> None:
    resolved = resolve_config(["+model=llama"], load_matrix(), lambda: discover_host(HOSTS / "n150"))
    assert resolved.choices["mesh"] == "n150" and resolved.choices["engine"] == "tt"
    assert resolved.config_hash == compose_config(["+model=llama", "mesh=n150", "engine=tt"]).config_hash


def test_selections_exclude_value_overrides() -> None:
    assert group_selections(["+model=llama", "serving.port=1", "mesh=t3k"]) == ("+model=llama", "mesh=t3k")
