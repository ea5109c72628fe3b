"""A site absorbs upgrades: two real appliances on the embedded default behind the real gateway (HAProxy), under a
closed-loop client, rolled by a real Ansible (ansible-core, local connection) running `appliance upgrade` on each.

In order, on the same two appliances:
0. bad input (a plugin state that does not exist, a site file naming an unreachable appliance) changes nothing, and
   a revision the site's mirror does not have stops the roll in its first play (the fetch) before any appliance
   leaves rotation;
1. a canary that answers noise (the tiny random-weight model) fails its eval gate on the first appliance, which rolls
   itself back; the roll stops there and the second appliance is never touched;
2. a real change (new engine pins, whose environment is built beside the running one, a smaller concurrency limit,
   and SmolLM2 pinned at a hub revision served by a real nginx mirror) passes every gate on both, one at a time, with
   the weights fetched and verified on both before the first is drained;
3. an appliance killed in the middle of an upgrade comes back on the generation it served before.
The client loses no request in 0, 1 and 2. The gates run a short eval set (testkit/data/eval-upgrade-gate.yaml) and
a short workload run; their tolerances are wide because both appliances share two busy cores. The mirror publishes
the embedded SmolLM2 (the files the appliances' model step built) in the hub's layout: the same weights under the
hub's name, so the gates compare like with like.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest

from appliance.control.client import ApiError
from appliance.control.documents import StateDocument
from appliance.resources import build_dir
from appliance.rollout.environments import build_environment, pins_hash
from appliance.weights.layout import entry_dir, stamp_file
from testkit.appliance_process import ROOT, ClosedLoop, Served, running_appliance, serve_command
from testkit.gateway_site import running_gateway
from testkit.helpers import cpu_plan, free_port
from testkit.paths import DATA
from testkit.weights_mirror import Mirror, Nginx, publish, running_nginx
from tests.rollout.test_roll_fetch import CHECKPOINT, pinned

pytestmark = pytest.mark.engine  # the conftest gate skips it without the CPU engine
ANSIBLE = ROOT / ".tools" / "ansible" / "bin" / "ansible-playbook"
APPLIANCE = str(ROOT / ".venv" / "bin" / "appliance")
BODY = {"model": "appliance/smollm2-135m-instruct", "prompt": "The capital of France is", "max_tokens": 8}
GATES = [
    "--eval-set",
    str(DATA / "eval-upgrade-gate.yaml"),
    "--eval-tolerance",
    "0.25",
    "--load-duration-s",
    "4",
    "--load-requests",
    "8",
    "--goodput-tolerance",
    "0.9",
    "--ttft-tolerance",
    "20",
]
# Short replies, and an SLO a 2-core host shared by two engines and a client meets: the goodput gate then compares
# like with like instead of two zeros or a zero and a lucky baseline.
EXTRA = (
    "supervisor.deregister_s=2",
    "workload.output_tokens.mean=24",
    "workload.output_tokens.max=32",
    "workload.slo_ttft_ms=30000",
    "workload.slo_itl_ms=3000",
)


REVISION = hashlib.sha1(b"SmolLM2 as the lab pins it").hexdigest()
UNPUBLISHED = hashlib.sha1(b"a SmolLM2 commit the lab's mirror never had").hexdigest()


@pytest.fixture(scope="module")
def site(cpu_engine: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Served, Path, str]]:
    """The two appliances (each engine on a core of its own), their site file and the gateway's URL."""
    tmp = tmp_path_factory.mktemp("upgrade-site")
    with (
        running_appliance(tmp / "a", *EXTRA, "engine.env.VLLM_CPU_OMP_THREADS_BIND=0", model="smollm2") as a,
        running_appliance(tmp / "b", *EXTRA, "engine.env.VLLM_CPU_OMP_THREADS_BIND=1", model="smollm2") as b,
    ):
        site_file = tmp / "lab.yaml"
        site_file.write_text(
            f"- {{name: a, url: {a.control_url}, token_env: A_TOKEN}}\n"
            f"- {{name: b, url: {b.control_url}, token_env: B_TOKEN}}\n"
        )
        models = [str(BODY["model"])]
        gateway = running_gateway(
            site_file, tmp / "gw", models=models, env=tokens(a, b), check_interval_ms=250, within_s=60
        )
        with gateway as url:
            yield a, b, site_file, url


@pytest.fixture(scope="module")
def mirror(site: tuple[Served, Served, Path, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nginx]:
    """The site's weights mirror: Debian's nginx serving, at REVISION, the SmolLM2 files an appliance's model step
    built (build/models/convert_smollm2.py), in the hub's layout."""
    a = site[0]
    built = Path(cpu_plan(a.cache, f"paths.cache_dir={a.cache}", model="smollm2").model_path)
    files = {p.name: p.read_bytes() for p in built.iterdir() if p.is_file() and not p.name.startswith(".")}
    root = tmp_path_factory.mktemp("mirror")
    publish(root / "site", CHECKPOINT, REVISION, files)
    with running_nginx(root / "nginx", Mirror(root / "site", root / "site", files), free_port()) as nginx:
        yield nginx


def weights_change(nginx: Nginx, revision: str = REVISION) -> list[str]:
    return [*pinned(revision), f"site.weights.mirror={nginx.url}"]


def store_entry(served: Served, revision: str = REVISION) -> Path:
    return entry_dir(served.cache / "weights", CHECKPOINT, revision)


def tokens(a: Served, b: Served) -> dict[str, str]:
    return {"A_TOKEN": a.token, "B_TOKEN": b.token}


def roll(site_file: Path, a: Served, b: Served, tmp: Path, *upgrade_args: str) -> subprocess.CompletedProcess[str]:
    """`appliance render ansible`, then ansible-playbook with the change and the gates as `upgrade_args`."""
    rendered = subprocess.run(
        [APPLIANCE, "render", "ansible", "--site-file", str(site_file), "--out", str(tmp)],
        capture_output=True,
        text=True,
    )
    assert rendered.returncode == 0, rendered.stderr
    env = (
        os.environ
        | tokens(a, b)
        | {
            "ANSIBLE_HOME": str(tmp / "ansible-home"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_LOG_PATH": str(tmp / "ansible.log"),
        }
    )
    extra = json.dumps({"upgrade_args": [*upgrade_args, *GATES]})
    argv = [str(ANSIBLE), "-i", str(tmp / "inventory.yml"), str(tmp / "upgrade.yml"), "-e", extra]
    started = time.time()
    with (
        (tmp / "ansible.out").open("w+") as out,
        subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True, env=env) as proc,
    ):
        log = tmp / "ansible.log"
        progressing(lambda: proc.poll() is not None, lambda: (_size(log), _steps(a), _steps(b)), "the roll", proc)
        out.seek(0)
        said = out.read()
    print(timeline(started, log, {"a": a, "b": b}))
    assert a.token not in said and b.token not in said
    return subprocess.CompletedProcess(argv, proc.returncode, said, "")


ANSIBLE_LINE = re.compile(r"^(?P<at>\S+ \S+) p=\d+ u=\S+ n=ansible \w+\| (?P<said>.*)$")
STALL_S = 600.0
"""How long a roll or an upgrade may go without a new Ansible line or upgrade step before the test calls it hung: a
bound on stalls, not on the host's speed (a slow host makes progress more slowly; a hung one makes none)."""


def progressing(
    done: Callable[[], bool], progress: Callable[[], object], what: str, proc: subprocess.Popen[str] | None = None
) -> None:
    """Wait until `done()`, failing only when `progress()` stops changing for STALL_S (killing `proc`)."""
    last, since = progress(), time.monotonic()
    while not done():
        time.sleep(0.5)
        if (now := progress()) != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > STALL_S:
            if proc is not None:
                proc.kill()
            raise AssertionError(f"{what}: no progress for {STALL_S:.0f} s; last {last}")


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0


def _steps(served: Served) -> object:
    """How far the appliance's upgrade has come (unreachable while it restarts)."""
    try:
        upgrade = served.state().upgrade
    except ApiError:
        return "unreachable"
    return None if upgrade is None else (upgrade.started, len(upgrade.steps), upgrade.steps[-1:], upgrade.outcome)


def timeline(started: float, log: Path, appliances: dict[str, Served]) -> str:
    """The roll step by step (shown with `pytest -s` or `-rP`): each appliance's upgrade steps, then the task lines
    of Ansible's own log (ANSIBLE_LOG_PATH stamps each), in seconds from the roll's start."""
    lines = [f"roll: {time.time() - started:.1f} s"]
    for name, served in appliances.items():
        upgrade = served.state().upgrade
        if upgrade is None or upgrade.started < started:
            continue
        lines.append(f"  {name} accepted at {upgrade.started - started:.1f} s, {upgrade.outcome}")
        for step in upgrade.steps:
            ended = step.ended or time.time()
            lines.append(f"  {name} {step.name}: {step.started - started:.1f} -> {ended - started:.1f} s")
    for line in log.read_text().splitlines() if log.is_file() else ():
        stamped = ANSIBLE_LINE.match(line)
        if stamped and stamped["said"].startswith(("TASK", "PLAY", "ok:", "fatal:", "changed:")):
            at = datetime.strptime(stamped["at"], "%Y-%m-%d %H:%M:%S,%f").timestamp() - started
            lines.append(f"  ansible {at:7.1f} s {stamped['said'][:100]}")
    return "\n".join(lines)


def generation(served: Served) -> str:
    state = served.state()
    assert state.generation is not None
    return state.generation.id


def test_bad_input_is_refused_in_one_line_before_any_appliance_changes(
    site: tuple[Served, Served, Path, str], tmp_path: Path
) -> None:
    a, b, site_file, _ = site
    before = (a.state().generation, b.state().generation)
    bad_state = subprocess.run(
        [APPLIANCE, "upgrade", "--url", a.control_url, "--against", "vllm=9.9.9", "serving.max_concurrency=8"],
        env=os.environ | {"APPLIANCE_TOKEN": a.token},
        capture_output=True,
        text=True,
    )
    assert bad_state.returncode == 2 and "names no recorded plugin state" in bad_state.stderr, bad_state.stderr
    assert len(bad_state.stderr.strip().splitlines()) == 1
    gone = f"http://127.0.0.1:{free_port()}"
    with_gone = tmp_path / "lab.yaml"
    with_gone.write_text(site_file.read_text() + f"- {{name: gone, url: {gone}, token_env: A_TOKEN}}\n")
    ran = roll(with_gone, a, b, tmp_path, "serving.max_concurrency=8")
    assert ran.returncode != 0 and "cannot upgrade" in ran.stdout, ran.stdout
    assert "upgrade one appliance at a time" not in ran.stdout  # the roll never started
    assert (a.state().generation, b.state().generation) == before
    assert a.state().upgrade is None and b.state().upgrade is None


def test_a_revision_the_mirror_lacks_stops_the_roll_in_its_fetch_play_before_any_appliance_changes(
    site: tuple[Served, Served, Path, str], mirror: Nginx, tmp_path: Path
) -> None:
    a, b, site_file, url = site
    before = {"a": a.state(), "b": b.state()}
    asked = len(mirror.requests())
    with ClosedLoop(url, streams=1, body=BODY) as load:
        ran = roll(site_file, a, b, tmp_path, *weights_change(mirror, UNPUBLISHED))
    assert ran.returncode != 0 and "stop before any appliance leaves rotation" in ran.stdout, ran.stdout
    assert f"{UNPUBLISHED}: HTTP 404 from {mirror.url}/api/models/{CHECKPOINT}/tree/{UNPUBLISHED}" in ran.stdout
    assert "PLAY [judge" not in ran.stdout and "PLAY [upgrade" not in ran.stdout  # the roll ended in its first play
    for name, served in (("a", a), ("b", b)):
        state = served.state()
        assert (state.generation, state.upgrade) == (before[name].generation, before[name].upgrade)  # none began
        assert not store_entry(served, UNPUBLISHED).exists()
    assert [(r.uri, r.status) for r in mirror.requests()[asked:]] == [
        (f"/api/models/{CHECKPOINT}/tree/{UNPUBLISHED}", 404)
    ] * 2
    assert load.failures() == {} and load.outcomes["ok"] > 0, load.outcomes  # never out of rotation


def test_a_canary_that_answers_noise_is_rolled_back_and_the_roll_stops_before_the_next_appliance(
    site: tuple[Served, Served, Path, str], tmp_path: Path
) -> None:
    a, b, site_file, url = site
    before_a, before_b = generation(a), generation(b)
    with ClosedLoop(url, streams=2, body=BODY) as load:
        ran = roll(site_file, a, b, tmp_path, "model=tiny")
    assert ran.returncode != 0, ran.stdout
    assert "stop the roll at the failed gate" in ran.stdout and "gate eval FAILED" in ran.stdout, ran.stdout
    state = a.state()
    assert state.upgrade is not None and state.upgrade.outcome == "rolled-back", state.upgrade
    failed = next(g for g in state.upgrade.gates if not g.passed)
    assert failed.name == "eval" and failed.figure is not None and failed.threshold is not None
    assert failed.figure < failed.threshold and state.upgrade.baseline and state.upgrade.baseline["accuracy"] >= 0.5
    assert generation(a) == before_a and state.served_name == BODY["model"] and state.state == "ready"
    assert a.control("GET", "/readyz").status_code == 200  # back in rotation
    assert b.state().upgrade is None and generation(b) == before_b  # never touched
    assert load.failures() == {} and load.outcomes["ok"] > 0, load.outcomes


def test_a_real_change_passes_every_gate_on_both_appliances_one_at_a_time_losing_no_request(
    site: tuple[Served, Served, Path, str], mirror: Nginx, tmp_path: Path
) -> None:
    a, b, site_file, url = site
    before = {"a": generation(a), "b": generation(b)}
    served = {"a": a, "b": b}
    recipe = tmp_path / "build"  # new engine pins: a recipe of its own, built beside the running environment
    shutil.copytree(build_dir() / "cpu", recipe / "cpu")
    environment = ROOT / ".engines" / f"cpu-{pins_hash(recipe / 'cpu')}"
    # Built before the client's load starts, by the code the upgrade runs, which then finds it built: under load the
    # two engines' workers hold both cores and the build takes minutes instead of 20 s.
    assert build_environment(ROOT / ".engines", "cpu", recipe) == environment / "bin" / "python"
    asked = len(mirror.requests())
    with ClosedLoop(url, streams=2, body=BODY) as load:
        ran = roll(
            site_file, a, b, tmp_path, "--build-dir", str(recipe), "serving.max_concurrency=8", *weights_change(mirror)
        )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    states = {"a": a.state(), "b": b.state()}
    for name, state in states.items():
        upgrade = state.upgrade
        assert upgrade is not None and upgrade.outcome == "passed", (name, upgrade)
        assert upgrade.old.id == before[name] and state.generation is not None
        assert state.generation.id == upgrade.new.id != before[name]
        assert state.previous_generation is not None and state.previous_generation.id == before[name]
        assert {g.name for g in upgrade.gates} == {"ready", "capabilities", "eval", "goodput", "ttft_p95"}
        assert all(g.passed for g in upgrade.gates) and state.max_concurrency == 8
        assert state.generation.engine_python == str(environment / "bin" / "python") == state.plan.argv[0]
        assert state.checkpoint == CHECKPOINT and state.served_name == BODY["model"]
        assert str(store_entry(served[name])) in state.plan.argv  # the engine serves the verified copy
    assert _one_at_a_time(states["a"], states["b"]), "the second upgrade began before the first ended"
    assert load.failures() == {} and load.outcomes["ok"] > 0, load.outcomes
    # Both hosts fetched every file once, and had it verified in their store before the first was drained.
    fetched = Counter(r.uri for r in mirror.requests()[asked:] if r.status == 200)
    assert set(fetched.values()) == {2} and len(fetched) == len(list(store_entry(a).iterdir())) + 1, fetched
    drained = min(state.upgrade.started for state in states.values() if state.upgrade is not None)
    for name in served:
        assert stamp_file(served[name].cache / "weights", CHECKPOINT, REVISION).stat().st_mtime < drained, name


def _one_at_a_time(first: StateDocument, second: StateDocument) -> bool:
    assert first.upgrade is not None and second.upgrade is not None
    ends = [s.ended for s in first.upgrade.steps if s.ended is not None]
    return max(ends) <= second.upgrade.started


def test_an_appliance_killed_mid_upgrade_comes_back_on_the_generation_it_served(
    site: tuple[Served, Served, Path, str], tmp_path: Path
) -> None:
    a, _, _, _ = site
    served_before = generation(a)
    cli = subprocess.Popen(
        [
            APPLIANCE,
            "upgrade",
            "--url",
            a.control_url,
            "serving.max_concurrency=4",
            "--skip",
            "eval",
            "--skip",
            "workload",
        ],
        env=os.environ | {"APPLIANCE_TOKEN": a.token},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def switching() -> bool:
        assert cli.poll() is None, "the upgrade ended before its switch"
        upgrade = a.state().upgrade
        return upgrade is not None and upgrade.started > started and upgrade.step == "switch"

    started = time.time()
    progressing(switching, lambda: _steps(a), "the upgrade before its switch", cli)
    os.kill(a.proc.pid, signal.SIGKILL)  # the appliance dies with the new engine booting
    a.proc.wait()
    said, _ = cli.communicate(timeout=60)
    assert cli.returncode == 4 and "lost the appliance mid-upgrade" in said, said
    _restart(a)
    state = a.wait_for("ready", timeout=600)
    assert state.generation is not None and state.generation.id == served_before
    assert (
        state.upgrade is not None
        and state.upgrade.outcome == "interrupted"
        and "step switch" in str(state.upgrade.reason)
    )
    assert state.max_concurrency == 8


def _restart(served: Served) -> None:
    """`serve` again as systemd's Restart= would: the same command on the same ports and cache."""
    engine_port, control_port = (int(u.rsplit(":", 1)[1]) for u in (served.engine_url, served.control_url))
    env = os.environ | {"APPLIANCE_TOKEN": served.token, "APPLIANCE_CACHE_DIR": str(served.cache)}
    with served.output.open("ab") as sink:
        served.proc = subprocess.Popen(
            serve_command(engine_port, control_port, *EXTRA, "engine.env.VLLM_CPU_OMP_THREADS_BIND=0", model="smollm2"),
            env=env,
            stdout=sink,
            stderr=sink,
        )
