"""Every value of the schema has its range, and a value outside it is refused when the config is parsed.

The fields are walked from the schema itself, so a new numeric key without a bound fails here.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import types
import typing
from collections.abc import Iterator
from typing import Any

import annotated_types
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from appliance.config import schema
from appliance.config.compose import compose_config
from appliance.errors import ConfigError

# Mesh options are package data, not operator input, and the workload is composed only by loadtest.
SECTIONS = {
    "serving": schema.ServingConfig,
    "control": schema.ControlConfig,
    "supervisor": schema.SupervisorConfig,
    "engine": schema.EngineConfig,
    "workload": schema.WorkloadConfig,
    "boards": schema.BoardsConfig,
    "workload.prompt_tokens": schema.LengthDistribution,
    "workload.output_tokens": schema.LengthDistribution,
    "workload.images": schema.ImagesConfig,
}


def numeric_fields() -> Iterator[tuple[str, type, list[object]]]:
    for section, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls, include_extras=True)
        for f in dataclasses.fields(cls):
            inner = hints[f.name]
            if typing.get_origin(inner) in (typing.Union, types.UnionType):
                inner = next(a for a in typing.get_args(inner) if a is not type(None))  # `X | None`
            base = typing.get_args(inner)[0] if typing.get_origin(inner) is typing.Annotated else inner
            if base in (int, float):
                # each Bound yields annotated_types' own Ge/Gt/Le, the objects pydantic applies
                yield f"{section}.{f.name}", base, [b for bound in getattr(inner, "__metadata__", ()) for b in bound]


FIELDS = list(numeric_fields())


def test_every_numeric_key_has_a_range() -> None:
    assert len(FIELDS) >= 25
    assert [key for key, _, bounds in FIELDS if not bounds] == []


def outside(bound: object) -> st.SearchStrategy[int]:
    """Integers on the wrong side of one bound."""
    if isinstance(bound, annotated_types.Ge):
        return st.integers(-(10**6), int(bound.ge) - 1)  # type: ignore[arg-type]
    if isinstance(bound, annotated_types.Gt):
        return st.integers(-(10**6), int(bound.gt))  # type: ignore[arg-type]
    assert isinstance(bound, annotated_types.Le), bound
    return st.integers(int(bound.le) + 1, int(bound.le) + 10**6)  # type: ignore[arg-type]


def nearest_outside(bound: object) -> int:
    """The value just past one bound: the first a range check must refuse."""
    if isinstance(bound, annotated_types.Ge):
        return int(bound.ge) - 1  # type: ignore[arg-type]
    if isinstance(bound, annotated_types.Gt):
        return int(bound.gt)  # type: ignore[arg-type]
    assert isinstance(bound, annotated_types.Le), bound
    return int(bound.le) + 1  # type: ignore[arg-type]


BOUNDS = [(key, bound) for key, _, bounds in FIELDS for bound in bounds]
ADAPTER: TypeAdapter[schema.ApplianceConfig] = TypeAdapter(schema.ApplianceConfig)


@pytest.fixture(scope="module")
def parsed() -> dict[str, Any]:
    """The default config as the schema receives it from a composition (composed once)."""
    return dataclasses.asdict(compose_config(["mesh=cpu"]).config)


@given(st.data())
def test_the_schema_refuses_a_generated_value_outside_its_range_at_its_key(
    parsed: dict[str, Any], data: st.DataObject
) -> None:
    """Generated values through the schema, without a Hydra composition per example (the one below is
    per bound): exactly the key set out of range is refused, as a range error."""
    key, bound = data.draw(st.sampled_from(BOUNDS))
    raw = copy.deepcopy(parsed)
    *sections, leaf = key.split(".")
    functools.reduce(lambda node, name: node[name], sections, raw)[leaf] = data.draw(outside(bound))
    with pytest.raises(ValidationError) as caught:
        ADAPTER.validate_python(raw)
    (error,) = caught.value.errors()
    assert ".".join(map(str, error["loc"])) == key and error["type"].startswith(("greater_than", "less_than"))


# One key per section and kind of bound goes through a real composition: turning a range error into a
# Problem depends only on those two (the schema test above covers every bound).
COMPOSED = list({(key.rsplit(".", 1)[0], type(bound)): (key, bound) for key, bound in BOUNDS}.values())


@pytest.mark.parametrize(("key", "bound"), COMPOSED, ids=[f"{k}:{type(b).__name__}" for k, b in COMPOSED])
def test_a_value_outside_its_range_is_refused_naming_its_key(key: str, bound: object) -> None:
    """Through a real composition: refused as one bad-value line naming the key."""
    with pytest.raises(ConfigError) as caught:
        compose_config(["mesh=cpu", f"++{key}={nearest_outside(bound)}"])  # ++: the default workload omits some keys
    (problem,) = caught.value.problems
    assert problem.code == "bad-value" and problem.key == key and "\n" not in problem.render()


@pytest.mark.parametrize(
    ("overrides", "code", "key"),
    [
        (("serving.port=8100",), "port-collision", "control.port"),
        (("serving.port=9000", "control.port=9000", "serving.host=0.0.0.0"), "port-collision", "control.port"),
        (("supervisor.backoff_initial_s=60",), "bad-value", "supervisor.backoff_initial_s"),
        (("supervisor.hang_timeout_s=1", "supervisor.health_interval_s=5"), "bad-value", "supervisor.hang_timeout_s"),
        (("workload.output_tokens.min=10", "workload.output_tokens.max=5"), "bad-value", "workload.output_tokens.min"),
        (("control.token_env=not a name",), "bad-value", "control.token_env"),
        (("engine.secret_env.X=$Y",), "bad-value", "engine.secret_env.X"),
        (("model.served_name=",), "bad-value", "model.served_name"),
    ],
)
def test_values_that_cannot_work_together_are_refused(overrides: tuple[str, ...], code: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        compose_config(["mesh=cpu", *overrides])
    assert [(p.code, p.key) for p in caught.value.problems] == [(code, key)]


def test_ports_may_match_on_different_addresses() -> None:
    compose_config(["mesh=cpu", "serving.port=8100", "serving.host=127.0.0.2"])
