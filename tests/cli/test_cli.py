"""The command line: exit codes, one-line errors, no tracebacks.

Run in-process through `appliance.cli.main.main`; one test runs the installed console script, whose
exit status and stderr only a real process shows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.helpers import Cli, Ran

BAD_INPUT = [
    ["validate", "serving.max_context=lots"],
    ["validate", "model=nope"],
    ["plan", "serving.port=="],
    ["validate", "--site-dir", "/nonexistent", "site=x"],
    ["serve", "+model=llama"],
]


def test_validate_accepts_the_contract_example(cli: Cli) -> None:
    done = cli(
        "validate",
        "+model=llama",
        "mesh=t3k",
        "model.checkpoint=meta-llama/Llama-3.3-70B-Instruct",
        "serving.max_context=65536",
        "serving.max_concurrency=32",
        "features.prefix_caching=true",
        "features.async_decode=true",
        "precision=accuracy",
        "site=lab-t3k",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: meta-llama/Llama-3.3-70B-Instruct on t3k")


def test_validate_json_lists_findings_and_exits_2(cli: Cli) -> None:
    done = cli("validate", "+model=llama", "mesh=n150", "serving.max_context=131072", "--json")
    assert done.returncode == 2
    report = json.loads(done.stdout)
    assert report["ok"] is False
    assert report["findings"][0]["code"] == "context-too-long"
    assert set(report["findings"][0]) == {"code", "severity", "key", "message", "fix", "rule", "change"}
    assert report["fit"]["bucket"] == "runnable with a change"
    assert "serving.max_context: Set serving.max_context=32768" in report["fit"]["reasons"][0]


@pytest.mark.parametrize("args", BAD_INPUT)
def test_bad_input_gives_one_line_per_problem_and_no_traceback(cli: Cli, args: list[str]) -> None:
    refused_as_bad_config(cli(*args))


def test_the_console_script_exits_2_with_one_line_per_problem_and_no_traceback() -> None:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "appliance"), *BAD_INPUT[0]],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    refused_as_bad_config(done)


def refused_as_bad_config(done: Ran | subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip() and all(line.startswith("error") for line in done.stderr.strip().splitlines())


def test_serve_of_a_tt_model_without_devices_says_how_to_run_the_default(cli: Cli) -> None:
    done = cli("serve", "+model=llama")
    assert "no Tenstorrent device found" in done.stderr and "appliance serve" in done.stderr


def test_plan_prints_a_runnable_command_line(cli: Cli) -> None:
    done = cli("plan", "mesh=cpu")
    assert done.returncode == 0
    assert "-m vllm.entrypoints.openai.api_server --model" in done.stdout


def test_matrix_json_lists_rows_for_a_mesh(cli: Cli) -> None:
    done = cli("matrix", "--mesh", "t3k", "--json")
    rows = json.loads(done.stdout)
    assert rows and all(r["mesh"] == "t3k" for r in rows)


def test_a_piped_matrix_keeps_every_cell_whole(tmp_path: Path) -> None:
    """A real pipe and a real file: rich assumes 80 columns off a terminal, which cut cells to "funct…"."""
    command = [sys.executable, "-m", "appliance.cli", "matrix"]
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    piped = subprocess.run(command, capture_output=True, text=True, check=True, env=env).stdout
    with (tmp_path / "matrix.txt").open("w") as file:
        subprocess.run(command, stdout=file, check=True, env=env)
    rows = json.loads(subprocess.run([*command, "--json"], capture_output=True, text=True, check=True).stdout)
    for text in (piped, (tmp_path / "matrix.txt").read_text()):
        assert "…" not in text
        cells = {cell.strip() for line in text.splitlines() for cell in line.split("│")}
        assert all({row["checkpoint"], row["status"], row["mesh"]} <= cells for row in rows)
