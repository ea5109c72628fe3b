"""The traffic step (`appliance loadtest --steps`): its plan, its bad flags, and a short step from under to over
capacity through the real `appliance gateway` (real HAProxy, real appliances on fake engines, on loopback)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from appliance.config.compose import compose_config
from appliance.loadtest.generator import RequestTrace
from appliance.loadtest.report import load_report
from appliance.loadtest.steps import StepPlan, outcome, plan_step_requests, step_plan, step_rows
from testkit.gateway_site import Engine, running_gateway, running_site
from testkit.helpers import Cli

WORKLOAD = compose_config([]).config.workload
# Two engines of 2 at once, 0.3 s an answer: the site serves 4 / 0.3 ≈ 13.3 requests/s.
ENGINES = [Engine(name, "tiny-step", max_concurrency=2, delay_s=0.3) for name in ("a", "b")]
CAPACITY = 2 * 2 / 0.3
SLO_S, SHARE = 1.0, 0.5
WAIT_S = SLO_S * SHARE


def test_a_step_plan_sends_each_steps_rate_and_the_classes_by_weight() -> None:
    plan = step_plan("1,4", 20.0, 5.0, "high=1,low=3")
    planned = plan_step_requests(WORKLOAD, plan)
    per_step = Counter(int((p.at_s or 0) // 20.0) for p in planned)
    assert 70 <= per_step[0] <= 130 and 330 <= per_step[1] <= 470  # Poisson around 100 and 400
    assert 0.2 <= sum(p.priority == "high" for p in planned) / len(planned) <= 0.3
    assert planned == plan_step_requests(WORKLOAD, plan)  # seeded: the same arrivals for every target


def test_each_answer_lands_in_one_column() -> None:
    def trace(error: str | None, at: float) -> RequestTrace:
        return RequestTrace(
            0, "chat", False, False, False, False, 8, 8, 4, 4, at, at, (at + 0.1,), (4,), at + 0.2, error
        )

    kinds = [None, "http-429", "http-503", "http-400", "timeout", "connect", "cancelled", "incomplete"]
    assert [outcome(trace(k, 0)) for k in kinds] == [
        *("admitted", "shed", "server-error", "rejected"),
        *("lost",) * 4,
    ]
    rows = step_rows([trace(k, 1.5) for k in kinds], StepPlan((1.0, 2.0), 2.0, 1.0), 500.0, 200.0)
    first, second = rows
    assert first.sent == 0 and second.sent == 8 and second.lost == 4 and second.goodput_per_s == 1.0


@pytest.mark.parametrize(
    ("flags", "key"),
    [
        (["--steps", "0.5,x"], "--steps"),
        (["--steps", "0,1"], "--steps"),
        (["--steps", "1", "--rate", "0"], "--rate"),
        (["--steps", "1", "--step-s", "-1"], "--step-s"),
        (["--steps", "1", "--classes", "high"], "--classes"),
        (["--steps", "1", "--classes", "high=1,high=2"], "--classes"),
        (["--steps", "1", "--classes", "high=-1"], "--classes"),
        (["--steps", "1", "--slo-ttft-ms", "0"], "--slo-ttft-ms"),
        (["--steps", "1", "--compare-scheduler"], "--steps"),
    ],
)
def test_a_bad_step_flag_is_one_line_naming_it(cli: Cli, tmp_path: Path, flags: list[str], key: str) -> None:
    url = [] if "--compare-scheduler" in flags else ["--url", "http://127.0.0.1:9"]  # argparse: one or the other
    done = cli("loadtest", *url, "--out", str(tmp_path / "r"), *flags)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f" {key}: " in line
    assert not (tmp_path / "r").exists()


def test_a_step_past_capacity_sheds_the_excess_fast_and_keeps_the_admitted_within_the_slo(
    cli: Cli, tmp_path: Path
) -> None:
    started = time.monotonic()
    with (
        running_site(ENGINES, tmp_path) as site,
        running_gateway(site, tmp_path / "gw", f"gateway.ttft_slo_s={SLO_S}", f"gateway.queue_share={SHARE}") as url,
    ):
        done = cli(
            *("loadtest", "--url", url, "--out", str(tmp_path / "report"), "--drain", "5"),
            *("--steps", "0.5,1,3", "--step-s", "3", "--rate", f"{CAPACITY:.2f}", "--classes", "high=1,low=3"),
            *("--slo-ttft-ms", f"{SLO_S * 1000:g}"),
        )
    assert done.returncode == 0, done.stderr
    report = load_report(tmp_path / "report" / "report.json")  # the step rows round-trip through the JSON
    rows = {(r.step, r.priority): r for r in report.steps}
    assert report.sent == sum(r.sent for r in report.steps if r.priority is None) > 0  # every request is counted
    for row in report.steps:
        assert row.server_errors == row.lost == row.rejected == 0, row
        assert row.ttft.p99 is None or row.ttft.p99 <= SLO_S * 1000, row
        assert row.shed_latency.max is None or row.shed_latency.max <= (WAIT_S + 0.25) * 1000, row
    assert rows[0, None].shed == 0  # under capacity, nothing is refused
    high, low = rows[2, "high"], rows[2, "low"]
    assert high.admitted_share >= 0.95 and low.shed > high.shed and low.admitted_share < 0.8, (high, low)
    assert time.monotonic() - started < 30
