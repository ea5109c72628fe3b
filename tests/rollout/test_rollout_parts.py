"""The upgrade's parts that need no engine: the generation journal across restarts, the gates' thresholds, the
overrides a change makes, environments named by their pins and freed, and the bad input `appliance upgrade`
refuses before anything changes."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from appliance.cli.upgrade import merged_overrides
from appliance.control.upgrade_documents import GenerationDocument, StepDocument, UpgradeDocument
from appliance.errors import ConfigError, LaunchError
from appliance.quality.evalset import DEFAULT_EVAL_SET, VISION_EVAL_SET
from appliance.resources import build_dir
from appliance.rollout.environments import build_environment, environment_dir, pins_hash, prune_environments
from appliance.rollout.gates import EvalMode, GateSettings, eval_mode, judge, load_gate_file, parse_settings
from appliance.rollout.generation import Journal, read_journal, resume, write_journal
from testkit.helpers import Cli, cpu_plan, free_port
from testkit.paths import ROOT

ANSIBLE = ROOT / ".tools" / "ansible" / "bin" / "ansible-playbook"

OLD = GenerationDocument("aaaaaaaaaaaa", ("model=smollm2",), "/e/cpu/bin/python", 1.0)
NEW = GenerationDocument("bbbbbbbbbbbb", ("model=smollm2", "serving.max_concurrency=8"), "/e/cpu/bin/python")


def test_a_journal_survives_a_restart_and_an_unfinished_upgrade_comes_back_interrupted_on_the_old_generation(
    tmp_path: Path,
) -> None:
    path = tmp_path / "generation-8100.json"
    running = UpgradeDocument(
        OLD, NEW, 2.0, steps=(StepDocument("out-of-rotation", 2.0, 2.5), StepDocument("switch", 3.0))
    )
    write_journal(path, Journal(OLD.overrides, None, OLD, last=running))
    resumed = resume(read_journal(path), OLD.overrides, None, OLD)
    assert resumed.current == OLD and resumed.last is not None and resumed.last.outcome == "interrupted"
    assert resumed.last.reason == "interrupted at step switch: the appliance stopped; serving generation aaaaaaaaaaaa"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # the atomic write leaves nothing beside it


def test_a_passed_upgrade_is_served_again_until_serves_own_command_line_changes(tmp_path: Path) -> None:
    path = tmp_path / "generation-8100.json"
    passed = Journal(OLD.overrides, None, replace(NEW, since=5.0), OLD, UpgradeDocument(OLD, NEW, 2.0, "passed"))
    write_journal(path, passed)
    assert resume(read_journal(path), OLD.overrides, None, OLD) == passed
    fresh = GenerationDocument("cccccccccccc", ("model=tiny",), "/e/cpu/bin/python", 9.0)
    assert resume(read_journal(path), ("model=tiny",), None, fresh) == Journal(("model=tiny",), None, fresh)
    assert resume(None, OLD.overrides, None, OLD) == Journal(OLD.overrides, None, OLD)


@pytest.mark.parametrize(("text", "where"), [("{", "the file"), ('{"base": [], "site_dir": null}', "current")])
def test_a_damaged_journal_is_one_line_naming_the_file(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "generation-8100.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        read_journal(path)
    line = caught.value.problems[0].render()
    assert line.startswith(f"error[generation-journal] {path}: ") and where in line and "\n" not in line


GRADED = EvalMode(DEFAULT_EVAL_SET, graded=True)


def test_each_gate_passes_at_its_threshold_and_fails_just_past_it() -> None:
    settings = GateSettings(eval_tolerance=0.1, goodput_tolerance=0.25, ttft_tolerance=0.5)
    baseline = {"accuracy": 0.8, "goodput": 4.0, "ttft_p95": 200.0}

    def passed(now: dict[str, float]) -> dict[str, bool]:
        return {g.name: g.passed for g in judge(baseline, now, settings, GRADED)}

    at = passed({"accuracy": 0.7, "goodput": 3.0, "ttft_p95": 300.0})
    past = passed({"accuracy": 0.69, "goodput": 2.99, "ttft_p95": 301.0})
    assert at == {"eval": True, "goodput": True, "ttft_p95": True}
    assert past == {"eval": False, "goodput": False, "ttft_p95": False}
    failed = judge(baseline, {"accuracy": 0.0}, settings, GRADED)[0]
    assert failed.render() == "gate eval FAILED: accuracy 0.00, at least 0.70 (baseline 0.80 - 0.10)"


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("smollm2", "tiny", EvalMode(DEFAULT_EVAL_SET, graded=True)),  # a real model replaced by noise is graded
        ("tiny", "tiny", EvalMode(DEFAULT_EVAL_SET, graded=False)),
        ("tiny_vl", "tiny_vl", EvalMode(VISION_EVAL_SET, graded=False)),
        ("smollm2", "tiny_vl", EvalMode(DEFAULT_EVAL_SET, graded=True)),  # one set for both: the text one
        (None, "tiny_vl", EvalMode(VISION_EVAL_SET, graded=False)),  # a first boot against a recorded baseline
    ],
)
def test_both_generations_are_asked_one_set_graded_unless_both_are_noise(
    tmp_path: Path, old: str | None, new: str, expected: EvalMode
) -> None:
    before = None if old is None else cpu_plan(tmp_path, model=old)
    assert eval_mode(before, cpu_plan(tmp_path, model=new), GateSettings()) == expected


def test_an_ungraded_eval_gate_needs_every_question_answered_and_says_why() -> None:
    mode = EvalMode(VISION_EVAL_SET, graded=False)
    (failed,) = judge({"accuracy": 1.0}, {"accuracy": 0.875}, GateSettings(), mode)
    assert not failed.passed and failed.render() == (
        "gate eval FAILED: answered 88% of the questions, all required: serving path only, "
        "the model's weights are random"
    )


@pytest.mark.parametrize(
    ("given", "where", "what"),
    [
        ({"eval_tolerance": 1.5}, "--eval-tolerance", "less than or equal to 1"),
        ({"ready_s": 0}, "--ready-s", "greater than 0"),
        ({"skip": ["ready"]}, "--skip", "'capabilities', 'eval' or 'workload'"),
        ({"load_requests": 0}, "--load-requests", "greater than or equal to 1"),
    ],
)
def test_a_gate_threshold_out_of_range_names_its_flag_and_range(
    given: dict[str, object], where: str, what: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_settings(given, "--")
    problem = caught.value.problems[0]
    assert problem.key.startswith(where) and what in problem.message, problem.render()


def test_a_change_replaces_the_keys_it_sets_and_appends_the_rest() -> None:
    base = ("model=smollm2", "serving.max_concurrency=16", "+engine.env.X=1")
    assert merged_overrides(base, ["serving.max_concurrency=8", "engine.env.X=2", "features.strict=true"]) == (
        "model=smollm2",
        "serving.max_concurrency=8",
        "engine.env.X=2",
        "features.strict=true",
    )


def test_a_gate_file_needs_the_baseline_of_each_gate_it_runs(tmp_path: Path) -> None:
    good = tmp_path / "gates.yaml"
    good.write_text("baseline: {accuracy: 0.7}\ngates: {skip: [workload], eval_tolerance: 0.05}\n")
    assert load_gate_file(good).gates.eval_tolerance == 0.05
    bad = {
        "baseline: {accuracy: 0.7}\n": "baseline",
        "baseline: {accuracy: 0.7, tps: 1}\n": "baseline.tps",
        "baseline: {accuracy: -1}\ngates: {skip: [workload]}\n": "accuracy",
    }
    for text, key in bad.items():
        good.write_text(text)
        with pytest.raises(ConfigError) as caught:
            load_gate_file(good)
        assert key in caught.value.problems[0].key, caught.value.problems[0].render()


def test_environments_are_named_by_their_pins_and_the_unkept_ones_are_freed(tmp_path: Path) -> None:
    recipe = tmp_path / "build"
    shutil.copytree(build_dir() / "cpu", recipe / "cpu")
    name = environment_dir(tmp_path / "engines", "cpu", recipe).name
    (recipe / "cpu" / "NOTES.md").write_text("notes change nothing")
    assert environment_dir(tmp_path / "engines", "cpu", recipe).name == name == f"cpu-{pins_hash(recipe / 'cpu')}"
    (recipe / "cpu" / "requirements.lock").write_text("changed pins\n")
    assert environment_dir(tmp_path / "engines", "cpu", recipe).name != name
    engines = tmp_path / "engines"
    for env in ("cpu", "cpu-111111111111", "cpu-222222222222", "cpu-333333333333", "cpu-notahash"):
        (engines / env / "bin").mkdir(parents=True)
        (engines / env / "bin" / "python").write_bytes(b"x" * 1024)
    plan = replace(cpu_plan(tmp_path), python=str(engines / "cpu-222222222222" / "bin" / "python"))
    freed = prune_environments(plan, {plan.python, str(engines / "cpu" / "bin" / "python")})
    assert freed == "; removed cpu-111111111111 (0.0 GiB), cpu-333333333333 (0.0 GiB)"
    assert sorted(p.name for p in engines.iterdir()) == ["cpu", "cpu-222222222222", "cpu-notahash"]


def test_upgrade_refuses_bad_input_in_one_line_and_changes_nothing(cli: Cli, tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    cases = [
        (("upgrade", "--url", closed, "serving.max_concurrency=8"), 3, "cannot upgrade"),
        (("upgrade", "--url", closed, "--eval-tolerance", "7"), 2, "error[bad-gate] --eval-tolerance"),
        (("render", "ansible"), 2, "error[missing-flag] --site-file"),
        (("render", "ansible", "--site-file", str(tmp_path / "none.yaml")), 2, "cannot read it"),
    ]
    for args, code, said in cases:
        done = cli(*args)
        assert done.returncode == code and said in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr


def test_new_pins_that_cannot_be_installed_fail_in_one_line_and_leave_the_running_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = tmp_path / "build"
    shutil.copytree(build_dir() / "cpu", recipe / "cpu")
    (recipe / "cpu" / "requirements.txt").write_text("appliance-unknown-pin==0.0.1\n")
    (recipe / "cpu" / "requirements.lock").write_text(f"appliance-unknown-pin==0.0.1 --hash=sha256:{'0' * 64}\n")
    closed = f"http://127.0.0.1:{free_port()}/simple"  # no index answers: the install fails here, offline
    for variable in ("PIP_INDEX_URL", "UV_INDEX_URL", "UV_DEFAULT_INDEX"):
        monkeypatch.setenv(variable, closed)
    monkeypatch.setenv("PIP_RETRIES", "0")
    with pytest.raises(LaunchError) as caught:
        build_environment(tmp_path / "engines", "cpu", recipe)
    message = str(caught.value)
    assert message.startswith(f"building {environment_dir(tmp_path / 'engines', 'cpu', recipe)} from ")
    assert message.endswith("the running generation is untouched") and "\n" not in message


def test_the_rendered_roll_judges_every_host_first_then_upgrades_one_at_a_time_and_never_holds_a_token(
    cli: Cli, tmp_path: Path
) -> None:
    site = tmp_path / "lab.yaml"
    site.write_text(
        "- {name: a, url: 'http://127.0.0.1:8100', token_env: A_TOKEN}\n- {name: b, url: "
        "'https://lab-02.example:8100', token_env: B_TOKEN, ca_file: /etc/ca.pem}\n"
    )
    done = cli(
        "render",
        "ansible",
        "serving.max_concurrency=8",
        "--site-file",
        str(site),
        "--out",
        str(tmp_path),
        env={"A_TOKEN": "token-value-a", "B_TOKEN": "token-value-b"},
    )
    assert done.returncode == 0, done.stderr
    inventory, playbook = (tmp_path / "inventory.yml").read_text(), (tmp_path / "upgrade.yml").read_text()
    assert "token-value" not in inventory + playbook + done.stdout
    hosts = yaml.safe_load(inventory)["all"]["children"]["lab"]["hosts"]
    assert hosts["a"]["ansible_connection"] == "local" and "ansible_connection" not in hosts["b"]
    assert hosts["b"]["appliance_target"] == [
        "--url",
        "https://lab-02.example:8100",
        "--token-file",
        "/dev/stdin",
        "--ca-file",
        "/etc/ca.pem",
    ]
    _, judge, roll = yaml.safe_load(playbook)  # the fetch play comes first: tests/rollout/test_roll_fetch.py
    assert judge["any_errors_fatal"] is True and "serial" not in judge
    assert (
        roll["serial"] == 1
        and roll["max_fail_percentage"] == 0
        and roll["vars"]["upgrade_args"] == ["serving.max_concurrency=8"]
    )
    tasks = [judge["tasks"][0]["block"][0], roll["tasks"][0]["block"][0]]
    assert [t["ansible.builtin.command"]["argv"].count("'--check'") for t in tasks] == [1, 0]
    assert all(t["no_log"] and "appliance_token_env" in t["ansible.builtin.command"]["stdin"] for t in tasks)
    checked = subprocess.run(
        [str(ANSIBLE), "--syntax-check", "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "upgrade.yml")],
        capture_output=True,
        text=True,
        env=os.environ | {"ANSIBLE_HOME": str(tmp_path / "ansible-home")},
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
