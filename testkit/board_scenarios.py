"""Play a recorded board scenario (testkit/data/boards/*.yaml) into a copy of its host tree, sample by sample."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import yaml

DATA = Path(__file__).parent / "data"
HOSTS = DATA / "hosts"
BOARDS = DATA / "boards"


def copy_tree(name: str, into: Path) -> Path:
    """A writable copy of the recorded host tree `name`."""
    root = into / name
    shutil.copytree(HOSTS / name, root)
    return root


def board_dir(root: Path, board: str) -> Path:
    return root / "sys" / "class" / "tenstorrent" / f"tenstorrent!{board}"


def hwmon_dir(root: Path, board: str) -> Path:
    return next((board_dir(root, board) / "device" / "hwmon").glob("hwmon*"))


def play(scenario: str, into: Path) -> Iterator[tuple[Path, float]]:
    """Apply each sample of `scenario` in turn to a copy of its tree; yields (the tree, the sample's time).

    Heartbeats the sample does not set advance by 97 (a live board's); the sample's own values hold as given."""
    spec = yaml.safe_load((BOARDS / f"{scenario}.yaml").read_text())
    root = copy_tree(spec["tree"], into)
    for i, sample in enumerate(spec["samples"]):
        for key, value in sample.items():
            if key == "remove":
                shutil.rmtree(board_dir(root, str(value)))
                continue
            board, _, file = key.partition("/")
            where = (
                hwmon_dir(root, board) / file.removeprefix("hwmon/")
                if file.startswith("hwmon/")
                else (board_dir(root, board) / file)
            )
            where.write_text(f"{value}\n")
        _beat(root, sample)
        yield root, i * float(spec["every_s"])


def _beat(root: Path, sample: dict[str, object]) -> None:
    """Advance the heartbeat of every board the sample leaves alone: a live board's ARC firmware keeps counting."""
    for node in (root / "sys" / "class" / "tenstorrent").iterdir():
        board = node.name.split("!")[1]
        if f"{board}/tt_heartbeat" not in sample:
            beat = node / "tt_heartbeat"
            beat.write_text(f"{int(beat.read_text()) + 97}\n")
