"""Every value of the schema has its range, and a value outside it is refused when the config is parsed.

The fields are walked from the schema itself, so a new numeric key without a bound fails here.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator

import annotated_types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.config import schema
from appliance.config.compose import compose_config
from appliance.errors import ConfigError

# Mesh options are package data, not operator input, and the workload is composed only by loadtest.
SECTIONS = {"serving": schema.ServingConfig, "control": schema.ControlConfig,
            "supervisor": schema.SupervisorConfig, "engine": schema.EngineConfig, "workload": schema.WorkloadConfig,
            "workload.prompt_tokens": schema.LengthDistribution,
            "workload.output_tokens": schema.LengthDistribution}  # fmt: skip


def numeric_fields() -> Iterator[tuple[str, type, list[object]]]:
    for section, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls, include_extras=True)
        for f in dataclasses.fields(cls):
            inner = hints[f.name]
            if typing.get_origin(inner) in (typing.Union, types.UnionType):
                inner = next(a for a in typing.get_args(inner) if a is not type(None))  # `X | None`
            base = typing.get_args(inner)[0] if typing.get_origin(inner) is typing.Annotated else inner
            if base in (int, float):
                yield f"{section}.{f.name}", base, list(getattr(inner, "__metadata__", ()))


FIELDS = list(numeric_fields())


def test_every_numeric_key_has_a_range() -> None:
    assert len(FIELDS) >= 25
    assert [key for key, _, bounds in FIELDS if not bounds] == []


def outside(bounds: list[object]) -> st.SearchStrategy[float]:
    options = []
    for b in bounds:
        if isinstance(b, annotated_types.Ge):
            options.append(st.integers(-(10**6), int(b.ge) - 1))  # type: ignore[arg-type]
        elif isinstance(b, annotated_types.Gt):
            options.append(st.integers(-(10**6), int(b.gt)))  # type: ignore[arg-type]
        elif isinstance(b, annotated_types.Le):
            options.append(st.integers(int(b.le) + 1, int(b.le) + 10**6))  # type: ignore[arg-type]
    return st.one_of(options)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_a_value_outside_its_range_is_refused_naming_its_key(data: st.DataObject) -> None:
    key, _, bounds = data.draw(st.sampled_from(FIELDS))
    value = data.draw(outside(bounds))
    with pytest.raises(ConfigError) as caught:
        compose_config(["mesh=cpu", f"++{key}={value}"])  # ++: the default workload omits some keys
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
