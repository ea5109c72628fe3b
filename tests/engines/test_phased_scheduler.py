"""The phase-exclusive scheduler class, driven step by step inside the CPU engine's interpreter.

testkit/engine_side/phased_steps.py builds real vLLM schedulers (the appliance's classes, and vLLM's
own as the control), feeds each the same arrivals and prints every step; these tests read that,
from one run of it per session.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from appliance.serve import ensure_model
from testkit.helpers import cpu_plan
from testkit.paths import ENGINE_SIDE

STEPS = ENGINE_SIDE / "phased_steps.py"
SCHEDULERS = ("phased", "phased-async", "upstream")


@pytest.fixture(scope="module")
def steps(cpu_engine: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every step of each scheduler in SCHEDULERS on the same arrivals, keyed by scheduler."""
    plan = cpu_plan(tmp_path_factory.mktemp("phased"))
    ensure_model(plan)
    done = subprocess.run(
        [str(cpu_engine), "-I", str(STEPS), plan.model_path, *SCHEDULERS], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(params=["phased", "phased-async"])
def phased(request: pytest.FixtureRequest, steps: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return steps[request.param]


def phases(step: dict[str, Any]) -> set[str]:
    return set(step["kinds"].values())


def test_every_step_is_prefill_only_or_decode_only(phased: dict[str, Any]) -> None:
    assert all(len(phases(step)) == 1 for step in phased["steps"])
    assert {"prefill", "decode"} == set().union(*(phases(s) for s in phased["steps"]))


def test_a_prompt_is_prefilled_whole_in_one_step(phased: dict[str, Any]) -> None:
    prefilled = [(rid, n) for s in phased["steps"] for rid, n in s["tokens"].items() if s["kinds"][rid] == "prefill"]
    assert sorted(rid for rid, _ in prefilled) == sorted(phased["prompts"])
    assert all(n == phased["prompts"][rid] for rid, n in prefilled)


def test_a_waiting_prompt_with_a_free_seat_preempts_the_decodes(phased: dict[str, Any]) -> None:
    steps = phased["steps"]
    # r2 arrives at step 3 while r0 and r1 decode: the very next step prefills it alone.
    assert steps[3]["tokens"] == {"r2": 300}


def test_a_prompt_with_no_free_seat_lets_the_decodes_run_instead_of_idling(phased: dict[str, Any]) -> None:
    stuck = [s for s in phased["steps"] if s["waiting_before"] and phases(s) == {"decode"}]
    assert stuck, "seats were never full while a prompt waited"
    assert all(s["tokens"] for s in phased["steps"])


def test_every_request_generates_all_its_tokens(phased: dict[str, Any]) -> None:
    assert phased["produced"] == phased["wanted"]


def test_vllms_own_scheduler_mixes_phases_on_the_same_arrivals(steps: dict[str, dict[str, Any]]) -> None:
    upstream = steps["upstream"]
    assert any(phases(step) == {"prefill", "decode"} for step in upstream["steps"])
    assert upstream["produced"] == upstream["wanted"]
