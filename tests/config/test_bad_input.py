"""Generated bad input: override sets and site files give a plan or a ConfigError, nothing else.

Each example is a full Hydra composition: 1,000 override sets and 500 site files under `make test` (CI), 20 and 10
in a plain `pytest` or `make test-fast` (`COMPOSING_EXAMPLES`, testkit/helpers.py).

The site files are half as many because their strategy spends them better. Each entry used to write its own parents
and stray text followed every file, so 84-89 % of the files were YAML that does not parse. Now half the files are
written nested and half have no stray text. Over three seeds, 500 such files reached as many distinct problems (each
code with each key, an unknown key's made-up names counted as one: 23-27 against 23-26 at 1,000) and as many
distinct sets of problems per file (50-62 against 48-63), and more of them a whole plan (16-22 against 11-13). The
test alone took 37.5 s and 43.9 s against 48.6 s and 51.9 s, side by side.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from appliance.compat.validate import validate
from appliance.config.compose import compose_config
from appliance.errors import ConfigError
from appliance.plan import build_plan
from testkit.helpers import COMPOSING_EXAMPLES
from tests.compat.test_validate import MATRIX

KEYS = st.sampled_from(
    [
        "serving.max_context",
        "serving.max_concurrency",
        "serving.data_parallel",
        "serving.port",
        "features.prefix_caching",
        "features.async_decode",
        "features.sample_on_device",
        "features.strict",
        "model.checkpoint",
        "model.family",
        "tt.trace_mode",
        "tt.trace_region_size",
        "tt.fabric_config",
        "engine.extra_args",
        "site.min_status",
        "mesh",
        "model",
        "precision",
        "engine",
        "site",
        "+bogus",
        "++model.extra",
        "~serving",
    ]
)
VALUES = st.one_of(
    st.integers(-5, 300_000).map(str),
    st.sampled_from(["true", "false", "null", "all", "t3k", "llama", "[--x,1]"]),
    st.text("abcdefghijklmnopqrstuvwxyz_-./=[]{},:'\" 0123456789", max_size=12),
)
SITE_KEYS = st.sampled_from(
    [
        "serving",
        "serving.max_context",
        "serving.port",
        "features",
        "features.strict",
        "site.name",
        "site.min_status",
        "model.checkpoint",
        "engine.extra_args",
        "tt",
        "tt.trace_mode",
        "defaults",
        "mesh",
        "bogus.key",
        "",
    ]
)
YAML_VALUES = st.one_of(
    st.integers(-3, 10**6),
    st.booleans(),
    st.none(),
    st.text(max_size=10),
    st.lists(st.sampled_from(["- override /mesh: t3k", "--x", 1, None]), max_size=3),
)


def outcome(overrides: list[str], site_dir: Path | None = None) -> None:
    try:
        build_plan(validate(compose_config(overrides, site_dir=site_dir), MATRIX))
    except ConfigError as error:
        assert error.problems and all(p.key and "\n" not in p.render() for p in error.problems)


@settings(max_examples=COMPOSING_EXAMPLES)
@given(st.lists(st.tuples(KEYS, VALUES), max_size=6))
def test_generated_override_sets_give_a_plan_or_a_config_error(pairs: list[tuple[str, str]]) -> None:
    outcome([f"{k}={v}" for k, v in pairs] + ["mesh=t3k", "+model=llama"])


def render_site(entries: list[tuple[str, object]], raw: str, nested: bool) -> str:
    """A site file of `entries` under their dotted keys, then `raw`. Nested, each parent is written once (a later
    entry replaces an earlier one it conflicts with); flat, each entry writes its own parents, so two entries under
    one parent repeat it: a duplicate key, which YAML refuses."""
    trees = [_tree(entries)] if nested else [_tree([entry]) for entry in entries]
    return "\n".join(["# @package _global_", *(line for tree in trees for line in _lines(tree, ""))]) + "\n" + raw


def _tree(entries: list[tuple[str, object]]) -> dict[str, object]:
    tree: dict[str, object] = {}
    for key, value in entries:
        *parents, leaf = key.split(".") if key else [""]
        node = tree
        for parent in parents:
            child = node.get(parent)
            if not isinstance(child, dict):
                child = node[parent] = {}
            node = child
        node[leaf] = value
    return tree


def _lines(tree: dict[str, object], indent: str) -> Iterator[str]:
    for key, value in tree.items():
        if isinstance(value, dict):
            yield f"{indent}{key}:"
            yield from _lines(value, indent + "  ")
        else:
            yield f"{indent}{key}: {value}" if isinstance(value, list) else f"{indent}{key}: {value!r}"


@settings(max_examples=COMPOSING_EXAMPLES // 2)
@given(
    st.lists(st.tuples(SITE_KEYS, YAML_VALUES), max_size=5),
    st.one_of(st.just(""), st.text("{}[]:,'\"- \n#&*!|>%@`abc", max_size=20)),
    st.booleans(),
)
@example([], "a\n\n\n>", True)  # stray text that YAML reads as one key holding a newline
def test_generated_site_files_give_a_plan_or_a_config_error(
    entries: list[tuple[str, object]], raw: str, nested: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "generated.yaml").write_text(render_site(entries, raw, nested))
        outcome(["site=generated", "mesh=t3k", "+model=llama"], Path(tmp))
