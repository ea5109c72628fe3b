"""Reports of image workloads, summarized from recorded runs against a real vision model.

The traces are real: testkit/data/loadtest-vision-tiny-vl.json holds three runs of `appliance loadtest` against
vLLM 0.32 on this 2-core host (its `source` and each run's `note` say how): `mixed` and `phased` are
conf/workload/vision.yaml against model=tiny_vl on the same arrivals, under vLLM's scheduler and the appliance's
phase-exclusive one; `refused` sent up to three images to the earlier prototype of tiny_vl, which allowed two."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydantic
import pytest

from appliance.config.schema import WorkloadConfig
from appliance.loadtest.generator import RequestTrace
from appliance.loadtest.render import metric_rows, render_markdown, write_reports
from appliance.loadtest.report import LoadReport, RunFacts, load_report, summarize
from testkit.paths import DATA, ROOT

RECORDED: dict[str, Any] = json.loads((DATA / "loadtest-vision-tiny-vl.json").read_text())["runs"]
PNG = b"\x89PNG\r\n\x1a\n"


def recorded(name: str) -> LoadReport:
    run = RECORDED[name]
    traces = pydantic.TypeAdapter(list[RequestTrace]).validate_python(run["traces"])
    facts = pydantic.TypeAdapter(RunFacts).validate_python(run["run"])
    return summarize(facts, pydantic.TypeAdapter(WorkloadConfig).validate_python(run["workload"]), traces)


@pytest.mark.parametrize("name", ["mixed", "phased", "refused"])
def test_text_and_image_requests_are_reported_apart_and_add_up(name: str) -> None:
    report = recorded(name)
    text, image = report.by_kind["text"], report.by_kind["image"]
    assert text.sent + image.sent == report.sent and text.completed + image.completed == report.completed
    assert text.images == 0 and image.images == sum(t.images for t in report.traces) > image.sent / 2
    assert image.ttft.count == sum(1 for t in report.traces if t.images and t.ok)
    assert text.goodput.met + image.goodput.met == report.goodput.met


def test_image_requests_take_longer_to_their_first_token_than_text_ones() -> None:
    report = recorded("mixed")
    text, image = report.by_kind["text"], report.by_kind["image"]
    assert image.ttft.p50 is not None and text.ttft.p50 is not None and image.ttft.p50 > text.ttft.p50
    assert image.images_reused > 0


def test_prompts_with_images_are_exactly_as_long_as_the_server_counted_before_the_run() -> None:
    report = recorded("mixed")
    assert report.prompt_exact_share == 1.0
    assert all(
        t.image_tokens_planned and t.prompt_tokens == t.prompt_tokens_planned + t.image_tokens_planned
        for t in report.traces
        if t.images
    )


def test_a_refused_image_request_is_a_client_error_and_the_run_goes_on() -> None:
    report = recorded("refused")
    refused = [t for t in report.traces if t.error]
    assert [t.images for t in refused] == [3, 3] and all(t.error == "http-400" for t in refused)
    assert "At most 2 image(s)" in (refused[0].detail or "")
    assert (report.client_errors, report.server_errors) == (2, 0)
    assert report.by_kind["image"].client_errors == 2 and report.by_kind["text"].client_errors == 0
    assert all(t.ok for t in report.traces if t.index > refused[-1].index)
    rows = {row.name: row.values[0] for row in metric_rows([report])}
    assert rows["client errors (4xx)"] == 2 and rows["server errors"] == 0
    assert "2 refused as invalid (4xx, client errors), 0 server errors" in render_markdown([report])


def test_phased_scheduling_stalls_decodes_during_image_prefills_on_the_same_arrivals() -> None:
    mixed, phased = recorded("mixed"), recorded("phased")
    assert [t.planned_s for t in mixed.traces] == [t.planned_s for t in phased.traces]
    assert phased.stalls.count > 10 * max(1, mixed.stalls.count)
    images = {t.index for t in phased.traces if t.images}
    assert 0 < phased.stalls.image_count < phased.stalls.count
    assert all(s.image for s in phased.stalls.stalls if s.cause in images)
    assert phased.stalls.image_total_s == pytest.approx(
        sum(s.end_s - s.start_s for s in phased.stalls.stalls if s.image)
    )
    rows = {row.name: row for row in metric_rows([mixed, phased])}
    assert rows["decode stalls in an image prefill"].values == (mixed.stalls.image_count, phased.stalls.image_count)
    assert rows["TTFT p50 (image)"].values[0] == mixed.by_kind["image"].ttft.p50


def test_the_split_survives_the_json_round_trip_and_the_plots_are_drawn(tmp_path: Path) -> None:
    report = recorded("phased")
    files = write_reports([report], tmp_path, ["report"])
    assert load_report(tmp_path / "report.json") == report
    assert "| goodput share (image) | % |" in (tmp_path / "report.md").read_text()
    assert all(p.read_bytes().startswith(PNG) for p in files if p.suffix == ".png")


def test_a_text_only_report_keeps_its_table_and_an_older_report_still_loads() -> None:
    """docsgen/data/loadtest-mixed-tiny.json was written before reports knew images."""
    old = load_report(ROOT / "docsgen" / "data" / "loadtest-mixed-tiny.json")
    assert old.by_kind == {} and old.client_errors == 0 and all(t.images == 0 for t in old.traces)
    names = [row.name for row in metric_rows([old])]
    assert "decode stalls in an image prefill" not in names and not any("(text)" in n for n in names)
