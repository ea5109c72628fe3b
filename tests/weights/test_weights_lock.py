"""The weights lock on disk, the checks on names made before any request, and the sources' kinds and token."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from appliance.weights.errors import WeightsError
from appliance.weights.layout import lock_path
from appliance.weights.lock import lock_digest, read_lock, write_lock
from appliance.weights.names import check_checkpoint, check_file_path, check_revision
from appliance.weights.source import FolderSource, HttpSource, Token, open_source
from testkit.weights_mirror import CHECKPOINT, REVISION, lock_for, mirror_files


def test_a_lock_written_is_read_back_the_same_from_its_place_in_the_locks_folder(tmp_path: Path) -> None:
    lock = lock_for(mirror_files())
    path = lock_path(tmp_path, CHECKPOINT, REVISION)
    write_lock(path, lock)
    assert path == tmp_path / "acme" / "tiny-llm" / f"{REVISION}.lock.json"
    assert read_lock(path) == lock
    assert [f["path"] for f in json.loads(path.read_text())["files"]] == sorted(mirror_files())
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # the temporary file was renamed over it


def test_the_lock_digest_changes_with_any_file_and_not_with_when_or_where_it_was_recorded() -> None:
    files = mirror_files()
    first, again = lock_for(files), lock_for(files)
    assert first.recorded_at != again.recorded_at and lock_digest(first) == lock_digest(again)
    assert lock_digest(lock_for({**files, "config.json": b"{}"})) != lock_digest(first)


def _valid() -> dict[str, Any]:
    files = [{"path": "a.bin", "size": 1, "sha256": "a" * 64}, {"path": "b.bin", "size": 2, "sha256": "b" * 64}]
    return {
        "checkpoint": CHECKPOINT,
        "revision": REVISION,
        "recorded_at": "2025-01-01T00:00:00Z",
        "source": "https://mirror.example",
        "files": files,
    }


def _with(change: dict[str, Any]) -> str:
    return json.dumps({**_valid(), **change})


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        ("{not json", "the file: Invalid JSON"),
        (json.dumps({k: v for k, v in _valid().items() if k != "source"}), "source: Field required"),
        (_with({"revision": "main"}), "revision: Value error, not a commit id"),
        (_with({"revision": REVISION.upper()}), "revision: Value error, not a commit id"),
        (_with({"checkpoint": "../etc"}), "checkpoint: Value error, not a repo id"),
        (_with({"recorded_at": "2025-01-01T00:00:00"}), "recorded_at: Input should have timezone info"),
        (_with({"extra": 1}), "extra: not a key of a weights lock"),
        (_with({"files": [{"path": "a", "size": 1, "sha256": "abc"}]}), "files.0.sha256: String should match"),
        (
            _with({"files": [{"path": "a", "size": "1", "sha256": "a" * 64}]}),
            "files.0.size: Input should be a valid int",
        ),
        (_with({"files": [{"path": "a", "size": -1, "sha256": "a" * 64}]}), "files.0.size: Input should be greater"),
        (_with({"files": [{"path": "../a", "size": 1, "sha256": "a" * 64}]}), "files.0.path: Value error, not a rel"),
        (_with({"files": list(reversed(_valid()["files"]))}), "files: Value error, files must be sorted by path"),
        (_with({"files": [_valid()["files"][0]] * 2}), "files: Value error, files must be sorted by path, each path"),
    ],
    ids=[
        "json",
        "missing",
        "branch",
        "upper",
        "checkpoint",
        "naive-time",
        "extra",
        "sha",
        "size-text",
        "negative",
        "escape",
        "unsorted",
        "duplicate",
    ],
)
def test_a_malformed_lock_is_one_line_naming_the_file_and_its_fault(tmp_path: Path, text: str, fault: str) -> None:
    path = tmp_path / "bad.lock.json"
    path.write_text(text)
    with pytest.raises(WeightsError) as raised:
        read_lock(path)
    message = str(raised.value)
    assert message.startswith(f"weights lock {path}: {fault}") and "\n" not in message


def test_a_missing_lock_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(WeightsError, match=r"weights lock .*nothing\.lock\.json: cannot read it: No such file"):
        read_lock(tmp_path / "nothing.lock.json")


@pytest.mark.parametrize("revision", ["main", "v1.0", REVISION[:39], REVISION.upper(), REVISION + "0", "", "a\nb"])
def test_a_revision_must_be_a_full_commit_id(revision: str) -> None:
    with pytest.raises(WeightsError) as raised:
        check_revision(revision)
    assert str(raised.value).startswith(f"revision {revision!r}: not a commit id") and "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "checkpoint",
    [
        "gpt2",
        "/abs/path",
        "org/../x",
        "org/..",
        "../org/x",
        "org//x",
        "org/x/y",
        "org/.hidden",
        "org/x y",
        "org\\x",
        "",
        "org/x\n",
    ],
)
def test_a_checkpoint_must_be_a_repo_id_safe_in_a_url_and_a_path(checkpoint: str) -> None:
    with pytest.raises(WeightsError) as raised:
        check_checkpoint(checkpoint)
    assert str(raised.value).startswith(f"checkpoint {checkpoint!r}: not a repo id") and "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a\\b", "", "a/", "x.part", "a\tb"]
)
def test_a_listed_file_path_must_stay_inside_its_folder(path: str) -> None:
    with pytest.raises(WeightsError) as raised:
        check_file_path(path)
    assert str(raised.value).startswith(f"file path {path!r}: ") and "\n" not in str(raised.value)


def test_good_names_pass() -> None:
    check_checkpoint("meta-llama/Llama-3.1-8B-Instruct")
    check_checkpoint("Qwen/Qwen2.5-0.5B")
    check_revision(REVISION)
    for path in ("config.json", ".gitattributes", "original/params.json", "model-00001-of-00004.safetensors"):
        check_file_path(path)


def test_a_source_is_an_http_url_a_file_url_or_an_absolute_folder(tmp_path: Path) -> None:
    assert isinstance(open_source("https://huggingface.co"), HttpSource)
    assert open_source(tmp_path.as_uri()).location == str(tmp_path)
    assert isinstance(open_source(str(tmp_path)), FolderSource)
    with pytest.raises(WeightsError, match=r"weights source 'mirror\.local/models': expected an http"):
        open_source("mirror.local/models")


def test_a_token_is_read_when_asked_and_its_faults_name_where_it_lives_never_its_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "hf_sEcReT0123456789"
    monkeypatch.setenv("WEIGHTS_TEST_TOKEN", secret)
    source = HttpSource("https://hub.example", token=Token(env="WEIGHTS_TEST_TOKEN"))
    assert Token(env="WEIGHTS_TEST_TOKEN").headers() == {"Authorization": f"Bearer {secret}"}
    assert secret not in repr(source) and secret not in repr(Token(env="WEIGHTS_TEST_TOKEN"))
    monkeypatch.delenv("WEIGHTS_TEST_TOKEN")
    assert Token(env="WEIGHTS_TEST_TOKEN").headers() == {}  # unset: no token sent (a site mirror may need none)
    file = tmp_path / "token"
    file.write_text(f"{secret}\n")
    assert Token(file=file).headers() == {"Authorization": f"Bearer {secret}"}
    file.write_text("")
    with pytest.raises(WeightsError, match=r"^hub token file .*token: it is empty$"):
        Token(file=file).headers()
    with pytest.raises(WeightsError, match=r"^hub token file .*absent: cannot read it: No such file"):
        Token(file=tmp_path / "absent").headers()


def test_nothing_is_logged_by_reading_a_lock(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    path = lock_path(tmp_path, CHECKPOINT, REVISION)
    write_lock(path, lock_for(mirror_files()))
    read_lock(path)
    assert not caplog.records
