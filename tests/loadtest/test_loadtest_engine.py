"""The load tester against the real CPU engine, booted through `appliance serve`.

Three scenarios: `loadtest --compare-scheduler` (mixed, then phase-exclusive scheduling, same
arrivals, on engines of its own), whose phased run must show decode stalls; and the full feature mix
(chat, completions, structured output, logprobs, penalties, shared prefixes) with its count and time
bounds, against the session's read-only appliance; and the `vision` workload against a real vision
model (the session's `vision_appliance`, model=tiny_vl). How many more stalls phased scheduling causes
is a measurement, not a test: bench/scheduler_stalls.py prints it.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from appliance.cli.main import main
from appliance.config.compose import compose_config
from appliance.loadtest.generator import RunWindow
from appliance.loadtest.report import LoadReport, load_report
from appliance.loadtest.run import LoadTarget, run_loadtest
from appliance.loadtest.workload import plan_requests
from testkit.appliance_process import Served, seed_tiny_model
from testkit.helpers import TINY, Cli

FEATURES = (
    "workload.structured_output_share=0.25",
    "workload.logprobs_share=0.25",
    "workload.penalties_share=0.25",
    "workload.shared_prefix_share=0.5",
)
# The shipped workloads are sized for smollm2 on this host; the tiny model is about 20x faster, so its
# stall probe sends 16 long prompts at 4/s while 400-token answers stream, and the mix comes at 2/s.
TINY_STALL_PROBE = (
    "workload=stall-probe",
    "workload.rate_per_s=4",
    "workload.max_requests=16",
    "workload.prompt_tokens={kind:uniform,mean:1200,min:900,max:1500}",
    "workload.output_tokens={kind:fixed,mean:400,min:400,max:400}",
)
TINY_MIX = ("workload=mixed", "workload.rate_per_s=2", *FEATURES)


@pytest.fixture(scope="module")
def compared(cpu_engine: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("compare")
    seed_tiny_model(tmp / "cache")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("APPLIANCE_CACHE_DIR", str(tmp / "cache"))
        code = main(["loadtest", TINY, *TINY_STALL_PROBE, "--compare-scheduler", "--out", str(tmp / "out")])
    assert code == 0, "loadtest --compare-scheduler failed; its serve logs are in " + str(tmp / "out")
    return tmp / "out", tmp / "cache"


def reports(out: Path) -> tuple[LoadReport, LoadReport]:
    return load_report(out / "mixed.json"), load_report(out / "phased.json")


def test_both_schedulers_serve_every_request_of_the_same_arrivals(compared: tuple[Path, Path]) -> None:
    mixed, phased = reports(compared[0])
    assert mixed.workload == phased.workload and mixed.sent == phased.sent == mixed.workload.max_requests
    assert mixed.failed == phased.failed == 0
    assert [t.planned_s for t in mixed.traces] == [t.planned_s for t in phased.traces]
    assert [t.prompt_tokens for t in mixed.traces] == [t.prompt_tokens_planned for t in phased.traces]
    assert all(t.output_tokens == t.output_tokens_planned for t in (*mixed.traces, *phased.traces))


def test_phased_scheduling_stalls_running_decodes_for_prompts_of_the_run(compared: tuple[Path, Path]) -> None:
    phased = reports(compared[0])[1]
    assert phased.stalls.count > 0, phased.stalls
    assert {s.cause for s in phased.stalls.stalls} <= {t.index for t in phased.traces}


def test_the_phased_run_really_used_the_appliances_scheduler_and_both_engines_stopped(
    compared: tuple[Path, Path],
) -> None:
    out, cache = compared
    engine_log = "".join(p.read_text(errors="replace") for p in (cache / "logs").glob("engine.log*"))
    assert engine_log.count("Using custom scheduler class appliance_phased.scheduler.PhasedScheduler") == 1
    for label in ("mixed", "phased"):
        assert "engine draining -> stopped" in (out / f"serve-{label}.log").read_text()


def test_compare_puts_the_two_runs_side_by_side(cli: Cli, compared: tuple[Path, Path], tmp_path: Path) -> None:
    out = compared[0]
    done = cli("compare", str(out / "mixed.json"), str(out / "phased.json"), "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    markdown = (tmp_path / "report.md").read_text()
    assert "| metric | unit | mixed | phased | delta | delta % |" in markdown
    assert all((tmp_path / f"{name}.png").is_file() for name in ("ttft_cdf", "itl_cdf", "throughput", "stalls"))


def test_the_full_feature_mix_runs_with_exact_prompts(cli: Cli, shared_appliance: Served, tmp_path: Path) -> None:
    done = cli(
        "loadtest",
        *TINY_MIX,
        "--url",
        shared_appliance.engine_url,
        "--max-requests",
        "24",
        "--duration",
        "20",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = load_report(tmp_path / "report.json")
    assert report.sent == 24 and report.failed == 0, report.errors
    assert report.prompt_exact_share == 1.0
    for feature in ("structured", "logprobs", "penalties", "shared_prefix"):
        assert any(getattr(t, feature) for t in report.traces), feature
    assert {t.api for t in report.traces} == {"chat", "completion"}
    free = [t for t in report.traces if not t.structured]
    assert all(t.output_tokens == t.output_tokens_planned for t in free)
    assert all(0 < t.output_tokens <= t.output_tokens_planned for t in report.traces if t.structured)
    assert report.ttft.count == 24 and report.generator_cpu_share < 0.5
    assert {"report.json", "report.md", "stalls.png"} <= {p.name for p in tmp_path.iterdir()}


def test_the_plan_of_the_feature_mix_is_what_was_sent(cli: Cli, shared_appliance: Served, tmp_path: Path) -> None:
    workload = compose_config(list(TINY_MIX)).config.workload
    done = cli(
        "loadtest", *TINY_MIX, "--url", shared_appliance.engine_url, "--max-requests", "6", "--out", str(tmp_path)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    sent = json.loads((tmp_path / "report.json").read_text())["traces"]
    planned = plan_requests(workload, 6)
    assert [(t["api"], t["structured"], t["prompt_tokens"]) for t in sent] == [
        (p.api, p.structured, p.prompt_tokens) for p in planned
    ]


def test_a_run_stops_sending_at_its_duration(cli: Cli, shared_appliance: Served, tmp_path: Path) -> None:
    started = time.monotonic()
    done = cli(
        "loadtest",
        "workload=chat",
        "--url",
        shared_appliance.engine_url,
        "--duration",
        "3",
        "--max-requests",
        "1000",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = load_report(tmp_path / "report.json")
    assert 8 <= report.sent < 1000 and all(t.sent_s < 3.0 for t in report.traces)
    assert report.failed == 0 and time.monotonic() - started < 300


async def test_a_ready_hook_holds_the_clock_until_it_returns(shared_appliance: Served) -> None:
    """How the accuracy bench starts the appliance's generator together with `vllm bench serve`."""
    released: list[float] = []

    async def ready() -> None:
        await asyncio.sleep(1.0)
        released.append(time.time())

    workload = compose_config(["workload=chat"]).config.workload
    report = await run_loadtest(
        workload, LoadTarget(shared_appliance.engine_url, "held"), RunWindow(30.0, 4), ready=ready
    )
    assert len(released) == 1 and report.run.started_at >= released[0]
    assert report.sent == 4 and report.failed == 0


def test_the_vision_workload_runs_against_a_real_vision_model(
    cli: Cli, vision_appliance: Served, tmp_path: Path
) -> None:
    """conf/workload/vision.yaml, cut to 12 requests, against model=tiny_vl served by `appliance serve`."""
    done = cli(
        "loadtest",
        "workload=vision",
        "--url",
        vision_appliance.engine_url,
        "--max-requests",
        "12",
        "--duration",
        "10",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = load_report(tmp_path / "report.json")
    assert report.sent == 12 and report.failed == 0, report.errors
    image = [t for t in report.traces if t.images]
    assert image and report.by_kind["image"].sent == len(image) and report.by_kind["image"].ttft.count == len(image)
    assert all(t.api == "chat" and t.image_tokens_planned for t in image)
    # The server counted each prompt as planned: the text exactly, each image as its processor predicts.
    assert report.prompt_exact_share == 1.0
    assert report.client_errors == report.server_errors == 0
