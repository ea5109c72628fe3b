"""No secret by value: a credential anywhere in config is refused, naming the key and the file, never the value."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.compat.validate import validate
from appliance.config.compose import compose_config
from appliance.errors import ConfigError
from appliance.plan import build_plan
from appliance.runtime.supervisor import engine_environment
from testkit.helpers import COMPOSING_EXAMPLES
from tests.compat.test_validate import MATRIX

TOKENS = ["hf_" + "a1B2" * 9, "sk-" + "x9" * 12, "ghp_" + "Z" * 36, "AKIA" + "ABCDEFGHIJKLMNOP"]
PLACES = [
    "engine.env.SOME_VAR={v}",
    "tt.trace_mode={v}",
    "site.description={v}",
    "engine.extra_args=[--api-key,{v}]",
    "engine.extra_args=['--hf-token={v}']",
    "engine.env.MY_SERVICE_PASSWORD=plain-value-{v}",
    "engine.env.WANDB_API_KEY=x{v}",
]


def refusal(*overrides: str, site_dir: Path | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        compose_config(list(overrides), site_dir=site_dir)
    return caught.value


@settings(max_examples=COMPOSING_EXAMPLES)  # 28 pairs: all of them under `make test`
@given(st.sampled_from(PLACES), st.sampled_from(TOKENS))
def test_a_planted_credential_is_refused_wherever_it_is_put(place: str, token: str) -> None:
    error = refusal("mesh=cpu", place.format(v=token.replace(" ", "_")))
    assert [p.code for p in error.problems] == ["secret-by-value"]
    problem = error.problems[0]
    assert token not in problem.render()
    assert problem.key.split("[")[0] in place and "command line" in problem.message


def test_a_malformed_override_that_quotes_a_token_masks_it() -> None:
    error = refusal("mesh=cpu", f"engine.env.X={TOKENS[0]}]")  # Hydra's own message quotes the override
    assert error.problems[0].code == "bad-override" and TOKENS[0] not in error.problems[0].render()
    assert "<redacted>" in error.problems[0].render()


def test_a_credential_in_a_site_file_names_the_file_and_how_to_pass_it(tmp_path: Path) -> None:
    (tmp_path / "leaky.yaml").write_text("# @package _global_\nengine:\n  env:\n    HF_TOKEN: " + TOKENS[0] + "\n")
    problem = refusal("site=leaky", "mesh=cpu", site_dir=tmp_path).problems[0]
    assert problem.key == "engine.env.HF_TOKEN" and str(tmp_path / "leaky.yaml") in problem.message
    assert "engine.secret_env.HF_TOKEN=<VAR>" in problem.fix and TOKENS[0] not in problem.render()


def test_names_of_variables_and_references_are_not_secrets() -> None:
    composed = compose_config(
        [
            "mesh=cpu",
            "serving.api_key_env=LAB_KEY",
            "site.hf_token_env=HUB",
            "engine.env.OMP_NUM_THREADS=2",
            "engine.secret_env.WANDB_API_KEY=LAB_WANDB",
            "engine.extra_args=[--api-key,$LAB_KEY]",
        ]
    )
    assert composed.config.engine.secret_env == {"WANDB_API_KEY": "LAB_WANDB"}


def test_every_shipped_config_composes_without_a_false_alarm(matrix: object) -> None:
    for site in ("default", "lab-t3k", "edge-n150"):
        compose_config([f"site={site}", "mesh=cpu"])


def test_secret_env_reaches_the_engine_by_name_and_the_plan_holds_only_the_name() -> None:
    plan = build_plan(validate(compose_config(["mesh=cpu", "engine.secret_env.WANDB_API_KEY=LAB_WANDB"]), MATRIX))
    assert plan.secret_env["WANDB_API_KEY"] == "LAB_WANDB" and "WANDB_API_KEY=$LAB_WANDB" in plan.command_line()
    env = engine_environment(plan, {"LAB_WANDB": "the-value"})
    assert env["WANDB_API_KEY"] == "the-value" and "the-value" not in plan.command_line()


@pytest.mark.parametrize(
    ("overrides", "codes"),
    [
        ((), set()),
        (("serving.host=0.0.0.0",), {"open-without-api-key"}),
        (("serving.host=0.0.0.0", "serving.api_key_env=LAB_KEY"), set()),
        (("serving.host=::1", "control.host=localhost"), set()),
        (("control.host=10.0.4.21",), {"control-plain-http"}),
        (("serving.host=appliance.lab", "control.host=0.0.0.0"), {"open-without-api-key", "control-plain-http"}),
    ],
)
def test_ports_opened_beyond_loopback_draw_a_warning(overrides: tuple[str, ...], codes: set[str]) -> None:
    validated = validate(compose_config(["mesh=cpu", *overrides]), MATRIX)
    assert {w.code for w in validated.warnings} & {"open-without-api-key", "control-plain-http"} == codes
