"""Every suggested fix leads somewhere: applied as an operator would, the fixes reach a runnable config within three
steps, or stop at an explicit "not runnable" whose fix names no setting the chain already changed.

A step applies every error's `change` (and the fit warnings' that the fit counts as "runnable with a change"),
later overrides replacing earlier ones of the same key, and judges again. The walk covers every matrix row under
every recorded plugin state at the row's own defaults, and Hypothesis draws the rows and states with the shared
override sets below (the feature flags, precisions, limits and parallelism an operator sets).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.compat.fit import FIT_WARNINGS, fit_of
from appliance.compat.matrix import load_matrix
from appliance.compat.state_set import load_states
from appliance.compat.validate import validate
from appliance.config.compose import compose_config, group_options
from appliance.errors import ConfigError, Problem
from testkit.helpers import COMPOSING_EXAMPLES

MATRIX = load_matrix()
STATES = tuple(f"vllm={state.vllm}" for state in load_states().states)
MODELS = set(group_options("model"))
ROWS = tuple((f.family, c.checkpoint, d.mesh) for f, c, d in MATRIX.rows() if d.mesh != "cpu" and f.family in MODELS)
STEPS = 3
# The override sets operators set on a row (tests/config/test_bad_input.py draws malformed ones; these are well formed).
SHARED = (
    "features.prefix_caching=true",
    "features.async_decode=true",
    "features.sample_on_device=off",
    "features.sample_on_device=all",
    "features.sample_on_device=decode_only",
    "features.chunked_prefill=true",
    "features.speculative=ngram",
    "precision=performance",
    "precision=accuracy",
    "serving.max_context=262144",
    "serving.max_concurrency=64",
    "serving.max_concurrency=7",
    "serving.data_parallel=2",
    "serving.data_parallel=4",
    "tt.trace_mode=bogus",
    "tt.bogus_key=1",
    "engine.extra_args=[--max-logprobs,50]",
    "serving.max_images_per_prompt=2",
    "serving.max_image_pixels=200704",
)


def _vision_rows() -> tuple[tuple[str, str, str], ...]:
    """Per vision architecture, its row with the shortest context (the hardest for one image to fit)."""
    found: dict[str, tuple[int, tuple[str, str, str]]] = {}
    for family, checkpoint, row in MATRIX.rows():
        arch = family.architectures[checkpoint.architecture]
        best = found.get(checkpoint.architecture)
        if arch.images and row.mesh != "cpu" and family.family in MODELS and (not best or row.max_context < best[0]):
            found[checkpoint.architecture] = (row.max_context, (family.family, checkpoint.checkpoint, row.mesh))
    return tuple(row for _, row in found.values())


VISION_ROWS = _vision_rows()
# Image settings operators get wrong: too many, too large, a cap the processor cannot take, a context one image
# cannot fit (alone and with the largest image), the latter two together.
IMAGE_SETS = (
    ("serving.max_images_per_prompt=12",),
    ("serving.max_image_pixels=99999999",),
    ("serving.max_image_pixels=50176",),
    ("serving.max_context=2048",),
    ("serving.max_context=2048", "serving.max_image_pixels=99999999"),
    ("serving.max_context=1024", "serving.max_image_pixels=50176", "serving.max_concurrency=64"),
)
_OVERRIDE = re.compile(r"(?<![\w.~])~?([a-z_]+(?:\.[a-z_]+)+)=")


def judge(overrides: Sequence[str], state: str) -> tuple[Problem, ...]:
    """The findings a user must act on: the errors, and the warnings the fit counts as a needed change."""
    try:
        found = validate(compose_config(list(overrides)), MATRIX, against=state).warnings
    except ConfigError as error:
        found = error.problems
    return tuple(p for p in found if p.severity == "error" or p.code in FIT_WARNINGS)


def walk(start: Sequence[str], state: str) -> None:
    """Apply the fixes from `start` under `state` until nothing is left to apply; fail on a cycle or a long chain."""
    settings_: dict[str, str] = {}
    for override in start:
        settings_[_key(override)] = override
    chain: list[str] = []
    seen = {tuple(sorted(settings_.values()))}
    for _ in range(STEPS + 1):
        found = judge(list(settings_.values()), state)
        if not found:
            return
        fit = fit_of(found)
        if fit.bucket == "not runnable":
            changed = {_key(o).lstrip("~") for o in chain}
            for problem in found:
                named = set(_OVERRIDE.findall(problem.fix)) & changed
                assert not named, f"{start} under {state}: {problem.render()} points back at {named} ({chain})"
            return
        for problem in found:
            assert problem.change, f"{start} under {state}: a change is needed but none is named: {problem.render()}"
            for override in problem.change:
                settings_[_key(override)] = override
                chain.append(override)
        state_key = tuple(sorted(settings_.values()))
        assert state_key not in seen, f"{start} under {state}: the fixes cycle: {' -> '.join(chain)}"
        seen.add(state_key)
    pytest.fail(f"{start} under {state}: no verdict after {STEPS} steps of fixes: {' -> '.join(chain)}")


def _key(override: str) -> str:
    return override.lstrip("+~").partition("=")[0]


def _row(row: tuple[str, str, str]) -> list[str]:
    family, checkpoint, mesh = row
    return [f"+model={family}", f"mesh={mesh}", f"model.checkpoint={checkpoint}"]


@pytest.mark.parametrize("state", STATES)
def test_every_rows_fixes_converge_at_its_defaults(state: str) -> None:
    for row in ROWS:
        walk(_row(row), state)


@pytest.mark.parametrize("state", STATES)
def test_image_fixes_converge_on_every_vision_row(state: str) -> None:
    assert len(VISION_ROWS) >= 5
    for row in VISION_ROWS:
        for extra in IMAGE_SETS:
            walk(_row(row) + list(extra), state)


@settings(max_examples=min(COMPOSING_EXAMPLES, 300), deadline=None)
@given(st.sampled_from(ROWS), st.sampled_from(STATES), st.lists(st.sampled_from(SHARED), max_size=3, unique=True))
def test_fixes_converge_under_the_shared_override_sets(row: tuple[str, str, str], state: str, extra: list[str]) -> None:
    walk(_row(row) + extra, state)


def test_the_block_output_cycle_ends_in_an_explicit_not_runnable() -> None:
    """The chain issue 45 found: sample_on_device off, then all, then off again, now ends at once, saying what would
    change it."""
    found = judge(["+model=gemma", "mesh=p300x2", "model.checkpoint=google/diffusiongemma-26B-A4B-it"], STATES[-1])
    fit = fit_of(found)
    assert fit.bucket == "not runnable"
    (problem,) = [p for p in found if p.key == "features.sample_on_device"]
    assert not problem.change and "No setting changes that" in problem.fix and "--probe" in problem.fix
