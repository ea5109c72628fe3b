"""Load reports: JSON round trip, Markdown with deltas, PNG plots, and the `compare` command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.config.compose import compose_config
from appliance.loadtest.generator import RequestTrace
from appliance.loadtest.render import metric_rows, render_markdown, write_reports
from appliance.loadtest.report import LoadReport, RunFacts, load_report, report_json, summarize
from testkit.helpers import Cli, free_port

PNG = b"\x89PNG\r\n\x1a\n"


def synthetic_report(label: str, step_s: float, stall_s: float) -> LoadReport:
    """Two overlapping streams; the second one's prefill stalls the first by `stall_s`."""
    workload = compose_config(["workload=stall-probe"]).config.workload
    first = [0.1 + i * step_s for i in range(20)]
    first = [t + (stall_s if t > 0.1 + 5 * step_s else 0.0) for t in first]
    second_start = 0.1 + 5 * step_s + stall_s - step_s / 2
    traces = [
        _trace(0, 0.0, first),
        _trace(1, 0.1 + 3 * step_s, [second_start + i * step_s for i in range(10)]),
    ]
    facts = RunFacts(label, "http://127.0.0.1:8000", "tiny", 1.7e9, max(first[-1], traces[1].done_s), 0.05)
    return summarize(facts, workload, traces)


def _trace(index: int, sent: float, times: list[float]) -> RequestTrace:
    return RequestTrace(
        index,
        "completion",
        False,
        False,
        False,
        False,
        900,
        900,
        len(times),
        len(times),
        sent,
        sent,
        tuple(times),
        (1,) * len(times),
        times[-1],
    )


def test_a_report_survives_its_json_round_trip() -> None:
    report = synthetic_report("phased", 0.01, 0.2)
    data = json.loads(json.dumps(report_json(report)))
    assert data["stalls"]["count"] == report.stalls.count == 1
    assert data["workload"]["name"] == "stall-probe"


def test_reading_a_report_back_gives_the_same_value(tmp_path: Path) -> None:
    report = synthetic_report("phased", 0.01, 0.2)
    (path,) = [p for p in write_reports([report], tmp_path, ["report"]) if p.suffix == ".json"]
    assert load_report(path) == report


def test_two_reports_render_side_by_side_with_deltas() -> None:
    mixed, phased = synthetic_report("mixed", 0.01, 0.0), synthetic_report("phased", 0.01, 0.2)
    rows = {row.name: row for row in metric_rows([mixed, phased])}
    assert rows["decode stalls"].values == (0, 1) and rows["decode stalls"].delta == 1
    assert rows["E2E max"].delta == pytest.approx(200.0)
    text = render_markdown([mixed, phased])
    assert "| metric | unit | mixed | phased | delta | delta % |" in text
    assert "| decode stalls |  | 0 | 1 | 1 | - |" in text


def test_plots_and_markdown_are_written_next_to_the_json(tmp_path: Path) -> None:
    files = write_reports([synthetic_report("a", 0.01, 0.0), synthetic_report("b", 0.01, 0.1)], tmp_path, ["a", "b"])
    names = {p.name for p in files}
    assert names == {"a.json", "b.json", "report.md", "ttft_cdf.png", "itl_cdf.png", "throughput.png", "stalls.png"}
    assert all(p.read_bytes().startswith(PNG) for p in files if p.suffix == ".png")
    assert "![stalls](stalls.png)" in (tmp_path / "report.md").read_text()


def test_compare_prints_deltas_and_writes_plots(cli: Cli, tmp_path: Path) -> None:
    write_reports([synthetic_report("run", 0.01, 0.0)], tmp_path / "a", ["report"])
    write_reports([synthetic_report("run", 0.01, 0.2)], tmp_path / "b", ["report"])
    a, b = tmp_path / "a" / "report.json", tmp_path / "b" / "report.json"
    renamed = tmp_path / "b" / "gpu.json"
    b.rename(renamed)
    done = cli("compare", str(a), str(renamed), "--out", str(tmp_path / "cmp"))
    assert done.returncode == 0, done.stderr
    assert "delta" in done.stdout and "decode stalls" in done.stdout
    assert "| metric | unit | report | gpu | delta | delta % |" in (tmp_path / "cmp" / "report.md").read_text()
    assert (tmp_path / "cmp" / "stalls.png").read_bytes().startswith(PNG)


def test_compare_refuses_a_file_that_is_not_a_report(cli: Cli, tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.json"
    bogus.write_text('{"hello": 1}')
    done = cli("compare", str(bogus), str(tmp_path / "missing.json"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error[bad-report] {bogus}: not a load report")
    done = cli("compare", str(tmp_path / "missing.json"), str(bogus))
    assert done.returncode == 2 and "missing.json: No such file or directory" in done.stderr


def test_loadtest_refuses_bad_workload_values_before_sending(cli: Cli, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: the check must come first
    done = cli("loadtest", "workload=mixed", "workload.rate_per_s=-1", "--url", url, "--out", str(tmp_path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "error[bad-value] workload.rate_per_s: -1 is out of range" in done.stderr
    done = cli("loadtest", "workload=nope", "--url", url)
    assert done.returncode == 2 and "workload" in done.stderr and "Traceback" not in done.stderr


def test_loadtest_says_when_the_server_cannot_be_reached(cli: Cli, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = cli("loadtest", "workload=chat", "--url", url, "--out", str(tmp_path))
    assert done.returncode == 4 and "Traceback" not in done.stderr
    assert f"error: cannot reach the OpenAI API at {url}" in done.stderr


def test_without_a_url_loadtest_targets_the_configs_own_engine(cli: Cli, tmp_path: Path) -> None:
    port = free_port()
    done = cli("loadtest", "workload=chat", "mesh=cpu", f"serving.port={port}", "--out", str(tmp_path))
    assert done.returncode == 4 and f"cannot reach the OpenAI API at http://127.0.0.1:{port}" in done.stderr


def test_loadtest_refuses_bad_image_values_before_sending(cli: Cli, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: the check must come first
    done = cli("loadtest", "workload=vision", "workload.images.sizes=[]", "--url", url, "--out", str(tmp_path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert (
        done.stderr.strip()
        == "error[bad-value] workload.images.sizes: is an empty list. Give workload.images.sizes at least one entry"
    )
    done = cli("loadtest", "workload=vision", "workload.images.sizes=[{width:0,height:9}]", "--url", url)
    assert done.returncode == 2 and "workload.images.sizes.0.width: 0 is out of range" in done.stderr
