"""The on-disk cache of the parsed matrix and plugin states: never stale, never an error.

Each test points APPLIANCE_CACHE_DIR at its own empty directory and works on a copy of the shipped data.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.compat.matrix import load_matrix
from appliance.compat.state_set import load_states
from appliance.resources import build_dir, models_dir

VERDICT = ["validate", "+model=llama", "mesh=n150", "serving.max_context=131072"]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("APPLIANCE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "data"


@pytest.fixture
def models(tmp_path: Path) -> Path:
    return Path(shutil.copytree(models_dir(), tmp_path / "models"))


def test_an_edited_matrix_file_is_seen_at_once(cache: Path, models: Path) -> None:
    before = load_matrix(models).families["llama"].description
    assert (cache / "matrix.pickle").is_file()
    llama = models / "llama.yaml"
    llama.write_text(llama.read_text().replace(f'description: "{before}"', 'description: "edited"', 1))
    assert load_matrix(models).families["llama"].description == "edited" != before


def test_the_cache_returns_what_parsing_does(cache: Path, models: Path) -> None:
    cold = load_matrix(models)
    warm = load_matrix(models)
    assert (cache / "matrix.pickle").is_file() and warm == cold and warm is not cold


def test_an_edited_plugin_state_is_seen_at_once(cache: Path, tmp_path: Path) -> None:
    build = tmp_path / "build"
    shutil.copytree(build_dir() / "tt" / "plugin-states", build / "tt" / "plugin-states")
    shutil.copy(build_dir() / "tt" / "pins.yaml", build / "tt" / "pins.yaml")
    pinned = load_states.__wrapped__(build).pinned  # past the in-process cache: the disk cache is under test
    path = build / "tt" / "plugin-states" / f"{pinned.name}.yaml"
    assert (cache / "plugin-states.pickle").is_file()
    path.write_text(path.read_text().replace(f'date: "{pinned.date}"', 'date: "edited"', 1))
    assert load_states.__wrapped__(build).pinned.date == "edited" != pinned.date


def test_a_corrupt_cache_file_is_ignored_and_rewritten(cache: Path, models: Path) -> None:
    expected = load_matrix(models)
    entry = cache / "matrix.pickle"
    entry.write_bytes(b"\x80\x05not a pickle at all")
    assert load_matrix(models) == expected
    key, value = pickle.loads(entry.read_bytes())
    assert isinstance(key, str) and value == dict(expected.families)


class Payload:
    """A pickle that would run a command when loaded by a plain unpickler."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def test_a_foreign_pickle_in_the_cache_runs_nothing(cache: Path, models: Path, tmp_path: Path) -> None:
    expected = load_matrix(models)
    marker = tmp_path / "ran"
    (cache / "matrix.pickle").write_bytes(pickle.dumps(("key", Payload(marker))))
    assert load_matrix(models) == expected
    assert not marker.exists()


def _verdict(cache_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "APPLIANCE_CACHE_DIR": str(cache_dir)}
    return subprocess.run(
        [sys.executable, "-m", "appliance.cli", *VERDICT, *extra], capture_output=True, text=True, env=env, check=False
    )


@pytest.mark.parametrize("extra", [(), ("--json",)], ids=["text", "json"])
def test_validate_says_the_same_with_a_cold_and_a_warm_cache(tmp_path: Path, extra: tuple[str, ...]) -> None:
    cold = _verdict(tmp_path / "cache", *extra)
    assert (tmp_path / "cache" / "data" / "matrix.pickle").is_file()
    warm = _verdict(tmp_path / "cache", *extra)
    assert cold.returncode == warm.returncode == 2
    assert (cold.stdout, cold.stderr) == (warm.stdout, warm.stderr)
    assert "context-too-long" in cold.stderr
