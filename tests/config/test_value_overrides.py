"""compose.py's two steps (the cached merge of the group selections, then Hydra's override step) give
exactly what one whole Hydra composition of every override gives: the same tree and choices, or the
same problem.

The reference below is Hydra's public compose API with every override at once. Each generated example
composes through the two steps twice (the first builds the merge where the module's cache has not seen its group
selections, the second reads it back) and once whole: 1,000 examples under `make test` (CI), 20 in a plain
`pytest`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from appliance.config.compose import CONF_DIR, compose_tree, composition_inputs, group_options
from appliance.config.problems import hydra_problem
from appliance.errors import ConfigError
from testkit.helpers import COMPOSING_EXAMPLES
from tests.config.test_bad_input import KEYS, VALUES

Outcome = tuple[dict[str, Any], dict[str, str]] | str
INTERPOLATING = st.sampled_from(["${serving.port}", "${oc.env:HOME}", "???", "${missing.key}", "'${serving}'"])
RACK = "# @package _global_\ndefaults:\n  - override /mesh: t3k\nsite:\n  name: rack\n"


@pytest.fixture(autouse=True, scope="module")
def _own_cache() -> Iterator[None]:
    """One empty cache for the module: Hypothesis runs every example of a test inside one fixture call."""
    with tempfile.TemporaryDirectory(prefix="value-overrides-") as tmp, pytest.MonkeyPatch.context() as patch:
        patch.setenv("APPLIANCE_CACHE_DIR", tmp)
        yield


def whole(normalized: tuple[str, ...], site_dir: Path | None, extra_root: Path | None) -> Outcome:
    """One Hydra composition of every override, its own node removed, resolved (or the problem it raises)."""
    import yaml
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import OmegaConfBaseException

    search = [f"hydra.searchpath=[file://{extra_root}]"] if extra_root else []
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose("config", overrides=[*search, *normalized], return_hydra_config=True)
        choices = {k: str(v) for k, v in cfg.hydra.runtime.choices.items() if not k.startswith("hydra/")}
        with open_dict(cfg):
            del cfg["hydra"]
        raw = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except (HydraException, OmegaConfBaseException, yaml.YAMLError, ValueError) as err:
        return hydra_problem(err, lambda group: group_options(group, site_dir)).render()  # the same nearest names
    assert isinstance(raw, dict)
    return raw, choices


def in_two_steps(normalized: tuple[str, ...], site_dir: Path | None, extra_root: Path | None) -> Outcome:
    try:
        raw, choices, _ = compose_tree(normalized, site_dir, None, extra_root)
    except ConfigError as err:
        (only,) = err.problems
        return only.render()
    return raw, choices


def same_both_ways(overrides: list[str], site_dir: Path | None = None, extra_root: Path | None = None) -> Outcome:
    try:
        normalized, _, _ = composition_inputs(overrides, None, None)
    except ConfigError as err:
        return str(err)  # refused before composing (`mesh=`): neither step runs
    expected = whole(normalized, site_dir, extra_root)
    assert in_two_steps(normalized, site_dir, extra_root) == expected  # the merge built, if new
    assert in_two_steps(normalized, site_dir, extra_root) == expected  # the merge read back
    return expected


@settings(max_examples=COMPOSING_EXAMPLES)
@given(st.lists(st.tuples(KEYS, st.one_of(VALUES, INTERPOLATING)), max_size=6), st.booleans())
@example([("serving.port", "8101"), ("serving.max_context", "4096")], True)
@example([("~serving.port", "8000"), ("+serving.port", "9000")], False)
@example([("serving.prot", "1")], True)
@example([("mesh", "t3k"), ("serving.port", "${serving.max_context}")], False)
def test_generated_override_sets_compose_as_one_hydra_composition(pairs: list[tuple[str, str]], llama: bool) -> None:
    same_both_ways([f"{k}={v}" for k, v in pairs] + (["+model=llama"] if llama else []))


@pytest.mark.parametrize(
    "overrides",
    [
        ["site=rack", "serving.port=8101", "+model=llama"],
        ["site=rack", "mesh=n150", "~serving.port"],
        ["serving.port=8100,8101"],  # a sweep outside --multirun: Hydra's error
        ["serving.port=[1"],  # an override that does not parse: Hydra's error
        ["slots=none", "serving.port=8101"],  # a group the appliance does not name, taken as a group
        ["hydra.job.name=x", "serving.port=8101"],
    ],
)
def test_site_dirs_sweeps_parse_errors_and_other_groups_compose_as_one_hydra_composition(
    overrides: list[str], tmp_path: Path
) -> None:
    (tmp_path / "sites").mkdir()
    (tmp_path / "sites" / "rack.yaml").write_text(RACK)
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "site").symlink_to(tmp_path / "sites", target_is_directory=True)
    outcome = same_both_ways(overrides, tmp_path / "sites", tmp_path / "root")
    if overrides[0] == "site=rack":
        assert isinstance(outcome, tuple) and outcome[1]["mesh"] == ("n150" if "mesh=n150" in overrides else "t3k")
