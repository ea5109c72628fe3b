"""Generated bad input: override sets and site files give a plan or a ConfigError, nothing else.

Each example is a full Hydra composition: 1,000 per test under `make test` (CI), 20 in a plain `pytest`
or `make test-fast` (`COMPOSING_EXAMPLES`, testkit/helpers.py).
"""

from __future__ import annotations

import tempfile
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


def render_site(entries: list[tuple[str, object]], raw: str) -> str:
    lines = ["# @package _global_"]
    for key, value in entries:
        *parents, leaf = key.split(".") if key else [""]
        indent = ""
        for parent in parents:
            lines.append(f"{indent}{parent}:")
            indent += "  "
        lines.append(f"{indent}{leaf}: {value!r}" if not isinstance(value, list) else f"{indent}{leaf}: {value}")
    return "\n".join(lines) + "\n" + raw


@settings(max_examples=COMPOSING_EXAMPLES)
@given(st.lists(st.tuples(SITE_KEYS, YAML_VALUES), max_size=5), st.text("{}[]:,'\"- \n#&*!|>%@`abc", max_size=20))
@example([], "a\n\n\n>")  # stray text that YAML reads as one key holding a newline
def test_generated_site_files_give_a_plan_or_a_config_error(entries: list[tuple[str, object]], raw: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "generated.yaml").write_text(render_site(entries, raw))
        outcome(["site=generated", "mesh=t3k", "+model=llama"], Path(tmp))
