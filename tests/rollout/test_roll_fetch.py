"""A roll fetches first: `appliance upgrade --fetch` against a real control API (the real app and upgrader, served
over HTTP) and a real nginx mirror (testkit/weights_mirror.py), and the rendered playbook's first play.

The appliance here composes its generations with a site directory and resolved its paths from an environment the
command does not share (another APPLIANCE_CACHE_DIR), as a systemd unit's appliance and an Ansible task would: the
fetch must land in the appliance's store and record the lock in its site's folder all the same.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from appliance.compat.matrix import load_matrix
from appliance.compat.validate import validate
from appliance.config.compose import compose_config
from appliance.control.api import create_app
from appliance.control.upgrade_documents import GenerationDocument
from appliance.plan import LaunchPlan, build_plan
from appliance.rollout.generation import Journal, journal_path, read_journal
from appliance.rollout.runner import Planned, Upgrader
from appliance.weights.layout import entry_dir, lock_path
from testkit.helpers import Cli, free_port
from testkit.recorded_appliance import RecordedSupervisor, serving
from testkit.weights_mirror import Mirror, Nginx, mirror_files, publish, running_nginx
from tests.rollout.test_rollout_parts import ANSIBLE

CHECKPOINT = "HuggingFaceTB/SmolLM2-135M-Instruct"
"""The hub checkpoint the matrix lists for the CPU engine (models/smollm2.yaml)."""
REVISION = hashlib.sha1(b"the revision the roll moves to").hexdigest()
UNPUBLISHED = hashlib.sha1(b"a revision the mirror never had").hexdigest()
APPLIANCE = str(Path(sys.executable).with_name("appliance"))
TOKEN = "roll-fetch-token"


def pinned(revision: str = REVISION) -> list[str]:
    """The change that moves SmolLM2 to the hub checkpoint at `revision`, served under the embedded model's name."""
    return [
        f"model.checkpoint={CHECKPOINT}",
        f"model.revision={revision}",
        "model.served_name=appliance/smollm2-135m-instruct",
    ]


@dataclass(frozen=True)
class Served:
    url: str
    plan: LaunchPlan
    sites: Path
    journal: Path
    nginx: Nginx
    files: dict[str, bytes]

    def entry(self, revision: str = REVISION) -> Path:
        return entry_dir(Path(self.plan.resolved["paths.cache_dir"]) / "weights", CHECKPOINT, revision)

    def lock(self, revision: str = REVISION) -> Path:
        return lock_path(self.sites / "weights-locks", CHECKPOINT, revision)


def _refuse(overrides: tuple[str, ...], against: str | None) -> Planned:
    raise AssertionError(f"the appliance was asked to judge {overrides}: a fetch must change nothing in it")


@pytest.fixture
def appliance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    """A running control API whose appliance serves `model=smollm2 mesh=cpu site=lab` (the site's mirror: a real
    nginx)."""
    files = mirror_files()
    publish(tmp_path / "mirror", CHECKPOINT, REVISION, files)
    mirror = Mirror(tmp_path / "mirror", tmp_path / "mirror", files)
    with running_nginx(tmp_path / "nginx", mirror, free_port()) as nginx:
        sites = tmp_path / "sites"
        sites.mkdir()
        (sites / "lab.yaml").write_text(f"# @package _global_\nsite: {{name: lab, weights: {{mirror: {nginx.url}}}}}\n")
        base = ("model=smollm2", "mesh=cpu", "site=lab")
        with monkeypatch.context() as serve_env:  # the appliance's own environment, which the command does not share
            serve_env.setenv("APPLIANCE_CACHE_DIR", str(tmp_path / "appliance-cache"))
            plan = build_plan(validate(compose_config(base, site_dir=sites), load_matrix()))
        supervisor = RecordedSupervisor(tmp_path / "logs")
        supervisor.plan = plan
        journal = journal_path(plan.state_dir, plan.control.port)
        current = GenerationDocument(plan.config_hash, base, plan.python, 1.0)
        upgrader = Upgrader(supervisor, Journal(base, str(sites), current), journal, _refuse)  # type: ignore[arg-type]
        with serving(create_app(supervisor, TOKEN, upgrades=upgrader)) as url:
            yield Served(url, plan, sites, journal, nginx, files)
        supervisor.log.close()


def _unchanged(served: Served) -> None:
    """The appliance serves the generation it served, with no upgrade begun (so never out of rotation)."""
    journal = read_journal(served.journal)
    assert journal is not None and journal.current.id == served.plan.config_hash and journal.last is None


def test_upgrade_fetch_brings_the_new_generation_into_the_appliances_store_and_changes_nothing_in_it(
    appliance: Served,
) -> None:
    argv = [APPLIANCE, "upgrade", "--fetch", "--url", appliance.url, "--token-file", "/dev/stdin", *pinned()]
    done = subprocess.run(argv, input=TOKEN, capture_output=True, text=True, env=os.environ, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"fetched: {CHECKPOINT}@{REVISION} in {appliance.entry()} ")
    assert TOKEN not in done.stdout + done.stderr
    assert {p: (appliance.entry() / p).read_bytes() for p in appliance.files} == appliance.files
    assert json.loads(appliance.lock().read_text())["revision"] == REVISION  # in the appliance's site folder
    mine = Path(os.environ["APPLIANCE_CACHE_DIR"]) / "weights" / CHECKPOINT
    assert not mine.exists()  # not in the store this command's own environment would name
    fetched = {r.uri.rsplit("/", 1)[-1] for r in appliance.nginx.requests() if r.status in (200, 206)}
    assert fetched == {*(p.rsplit("/", 1)[-1] for p in appliance.files), REVISION}  # every file, and the listing
    _unchanged(appliance)
    again = subprocess.run(argv, input=TOKEN, capture_output=True, text=True, env=os.environ, timeout=120)
    assert again.returncode == 0 and "already in the store" in again.stdout, again.stderr


def test_a_fetch_the_mirror_cannot_serve_stops_in_one_line_exit_3_and_changes_nothing(
    appliance: Served, cli: Cli
) -> None:
    done = cli("upgrade", "--fetch", "--url", appliance.url, *pinned(UNPUBLISHED), env={"APPLIANCE_TOKEN": TOKEN})
    assert done.returncode == 3 and done.stdout == "", done.stdout
    said = done.stderr.strip().splitlines()[-1]
    assert UNPUBLISHED in said and "404" in said, done.stderr
    assert not appliance.entry(UNPUBLISHED).exists() and not appliance.lock(UNPUBLISHED).exists()
    _unchanged(appliance)


def test_a_generation_that_pins_nothing_has_nothing_to_fetch(appliance: Served, cli: Cli) -> None:
    done = cli(
        "upgrade", "--fetch", "--url", appliance.url, "serving.max_concurrency=4", env={"APPLIANCE_TOKEN": TOKEN}
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"{appliance.url}: nothing to fetch: the new generation pins no hub "
        "checkpoint (appliance/smollm2-135m-instruct)"
    ]
    assert appliance.nginx.requests() == []
    _unchanged(appliance)


def test_an_unreachable_appliance_is_one_line_exit_3(cli: Cli) -> None:
    done = cli("upgrade", "--fetch", "--url", f"http://127.0.0.1:{free_port()}", *pinned())
    assert done.returncode == 3 and "cannot upgrade" in done.stderr and len(done.stderr.splitlines()) == 1


STUB = """import json, sys
with open(sys.argv[1], "a") as log:
    log.write(json.dumps({"argv": sys.argv[2:], "stdin": sys.stdin.read()}) + "\\n")
if "http://127.0.0.1:8100" in sys.argv:
    sys.exit(print("http://127.0.0.1:8100: nothing to fetch"))
print("fetching ... (a progress line on stderr)", file=sys.stderr)
print("error: the listing of HuggingFaceTB/SmolLM2-135M-Instruct@...: HTTP 404 from the mirror", file=sys.stderr)
sys.exit(3)
"""
"""`appliance` as the roll's hosts would run it, what it was given recorded: a's fetch passes, b's fails."""


def test_the_rendered_roll_fetches_on_every_host_at_once_and_a_failed_fetch_stops_it_there(
    cli: Cli, tmp_path: Path
) -> None:
    site = tmp_path / "lab.yaml"
    site.write_text(
        "- {name: a, url: 'http://127.0.0.1:8100', token_env: A_TOKEN}\n"
        "- {name: b, url: 'http://127.0.0.1:8101', token_env: B_TOKEN}\n"
    )
    done = cli("render", "ansible", *pinned(), "--site-file", str(site), "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    fetch, judge, upgrade = yaml.safe_load((tmp_path / "upgrade.yml").read_text())
    assert fetch["name"] == "fetch and verify the new generation's weights on every host"
    assert fetch["hosts"] == judge["hosts"] == upgrade["hosts"] == "lab" and "serial" not in fetch
    assert fetch["any_errors_fatal"] is True and upgrade["serial"] == 1
    assert fetch["tasks"][0]["block"][0]["no_log"] is True
    # The real ansible-playbook runs the rendered roll, each host's `appliance` a stub; b's fetch fails.
    (tmp_path / "stub.py").write_text(STUB)
    command = json.dumps({"appliance_command": [sys.executable, str(tmp_path / "stub.py"), str(tmp_path / "ran")]})
    env = os.environ | {
        "A_TOKEN": "token-value-a",
        "B_TOKEN": "token-value-b",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
    }
    ran = subprocess.run(
        [str(ANSIBLE), "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "upgrade.yml"), "-e", command],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert ran.returncode != 0 and "PLAY [judge" not in ran.stdout, ran.stdout  # stopped in the first play
    said = {
        line[8]: line.split('"msg": ', 1)[1]
        for line in ran.stdout.splitlines()
        if line.startswith("fatal: [") and '"msg": ' in line
    }
    assert said == {  # b's own last error line (not its progress); a's step passed and says so
        "b": '"error: the listing of HuggingFaceTB/SmolLM2-135M-Instruct@...: HTTP 404 from the mirror"}',
        "a": '"stopped with the others (another host failed); here: http://127.0.0.1:8100: nothing to fetch"}',
    }, ran.stdout
    calls = sorted((json.loads(line) for line in (tmp_path / "ran").read_text().splitlines()), key=str)
    target = [["--url", f"http://127.0.0.1:{port}", "--token-file", "/dev/stdin"] for port in (8100, 8101)]
    assert [c["argv"] for c in calls] == [["upgrade", *t, "--fetch", *pinned()] for t in target]
    assert [c["stdin"] for c in calls] == ["token-value-a\n", "token-value-b\n"]  # the token on stdin only
    assert "token-value" not in ran.stdout + (tmp_path / "upgrade.yml").read_text()
