"""Set-up steps: real child processes shown with their progress, real uv counted, real make driven by run_steps.py."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console

from appliance.engines.pins import BUILD_DIR
from appliance.engines.steps import SetupStep, StepFailed, run_steps

UV = Path(sys.executable).with_name("uv")
RUN_STEPS = BUILD_DIR / "setup" / "run_steps.py"


def python_step(tmp_path: Path, name: str, code: str) -> SetupStep:
    return SetupStep(name, (sys.executable, "-c", textwrap.dedent(code)), tmp_path / "logs" / f"{name}.log")


def plain_console() -> tuple[Console, io.StringIO]:
    text = io.StringIO()
    return Console(file=text, force_terminal=False, width=200), text


def test_steps_run_at_once_and_each_ends_in_one_line_with_its_count(tmp_path: Path) -> None:
    # Each step waits for the other's mark: both can finish only if they run at the same time.
    wait = """
        import pathlib, sys, time
        here, other = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
        here.touch()
        deadline = time.monotonic() + 20
        while not other.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        print("progress: 3/4 items")
        sys.exit(0 if other.exists() else 9)
    """
    a, b = tmp_path / "a", tmp_path / "b"
    steps = [
        SetupStep("first", (sys.executable, "-c", textwrap.dedent(wait), str(a), str(b)), tmp_path / "first.log"),
        SetupStep("second", (sys.executable, "-c", textwrap.dedent(wait), str(b), str(a)), tmp_path / "second.log"),
    ]
    console, text = plain_console()
    outcomes = run_steps(steps, console)
    assert [outcome.name for outcome in outcomes] == ["first", "second"]
    lines = text.getvalue().splitlines()
    assert sorted(lines[:2]) == ["[setup] first: started", "[setup] second: started"]
    assert {line.split(":")[0] for line in lines[2:]} == {"[setup] first", "[setup] second"}
    assert all(" done in " in line and ", 3/4 items: " in line for line in lines[2:])


def test_a_failed_step_names_itself_its_exit_code_its_last_line_and_its_log(tmp_path: Path) -> None:
    step = python_step(tmp_path, "compile", "import sys\nprint('compiling', flush=True)\nsys.exit('no compiler')")
    console, text = plain_console()
    with pytest.raises(StepFailed) as failed:
        run_steps([step], console)
    message = str(failed.value)
    assert message.startswith("set-up step 'compile' failed with exit code 1 after ")
    assert message.endswith(f": no compiler (log: {step.log})")
    assert step.log.read_text() == "compiling\nno compiler\n"
    assert text.getvalue().splitlines()[-1].startswith("[setup] compile: failed (exit 1) in ")


def test_steps_in_order_stop_at_the_first_failure(tmp_path: Path) -> None:
    steps = [python_step(tmp_path, "one", "raise SystemExit(2)"), python_step(tmp_path, "two", "print('ran')")]
    with pytest.raises(StepFailed) as failed:
        run_steps(steps, plain_console()[0], concurrent=False)
    assert [failure.name for failure in failed.value.failures] == ["one"]
    assert not steps[1].log.exists()


def test_on_a_terminal_rich_draws_each_step_with_its_count_and_elapsed_time(tmp_path: Path) -> None:
    uv_like = "print('Resolved 3 packages in 10ms')\nprint('Installed 3 packages in 5ms')\nprint(' + mdurl==0.1.2')"
    text = io.StringIO()
    run_steps([python_step(tmp_path, "packages", uv_like)], Console(file=text, force_terminal=True, width=150))
    shown = text.getvalue()
    assert "packages done" in shown and "3/3 packages" in shown and "0:00:0" in shown and "+ mdurl==0.1.2" in shown


def test_uv_installing_a_hash_locked_file_is_counted_in_packages(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([str(UV), "venv", "--quiet", str(venv)], check=True, timeout=60)
    lock = tmp_path / "mdurl.lock"
    lock.write_text(
        "mdurl==0.1.2 --hash=sha256:84008a41e51615a49fc9966191ff91509e3c40b939176e643fd50a5c2196b8f8 "
        "--hash=sha256:bb413d29f5eea38f31dd4754dd7377d4465116fb207585f97bf925588687c1ba\n"
    )
    step = SetupStep(
        "mdurl",
        (str(UV), "pip", "install", "--python", str(venv / "bin" / "python"), "--require-hashes", "-r", str(lock)),
        tmp_path / "mdurl.log",
    )
    console, text = plain_console()
    run_steps([step], console)
    assert ", 1/1 packages: + mdurl==0.1.2" in text.getvalue()


MAKEFILE = """\
built:
\t@echo making built; touch built
ok: built
broken:
\t@echo compiling; echo 'the compiler is missing' >&2; exit 4
"""


def test_run_steps_builds_make_targets_and_a_failed_one_names_its_log(tmp_path: Path) -> None:
    (tmp_path / "Makefile").write_text(MAKEFILE)
    command = [sys.executable, str(RUN_STEPS), "--make", "make", "--logs", str(tmp_path / "logs")]
    done = subprocess.run(
        [*command, "Fine=built", "Broken one=broken"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    log = tmp_path / "logs" / "broken-one.log"
    assert last.startswith("set-up step 'Broken one' failed with exit code 2 after ")
    assert f"(log: {log})" in last and "Error 4" in last
    assert "the compiler is missing" in log.read_text()
    assert (tmp_path / "built").exists()
    again = subprocess.run([*command, "Fine=built"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "[setup] Fine: done in" in again.stderr and "up to date: built" in again.stderr
