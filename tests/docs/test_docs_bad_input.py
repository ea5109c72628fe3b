"""`make docs` on a broken tree: one line naming the page, command or key, exit 1, no traceback.

Each test builds a copy of the checkout (`python -m docsgen`, what `make docs` runs, with the copy first on the
path) with one thing broken: a link to a page that does not exist, a command without help text, a config key
without a description. The folders no test breaks are linked, not copied.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.paths import ROOT

COPIED = ("appliance", "docsgen", "docs")
LINKED = ("conf", "models", "build", "engine_plugins", "tests", "testkit", "tui", "pyproject.toml")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    copy = tmp_path / "tree"
    for name in COPIED:
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in LINKED:
        (copy / name).symlink_to(ROOT / name)
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    return copy


def make_docs(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [sys.executable, "-m", "docsgen", "--site-dir", str(tree.parent / "site")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def one_line(ran: subprocess.CompletedProcess[str]) -> str:
    assert ran.returncode == 1, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in ran.stderr, ran.stderr
    return lines[0]


def test_a_broken_link_fails_naming_the_page(tree: Path) -> None:
    edit(tree / "docs" / "guides" / "console.md", "\n\n", "\n\nSee [the manual](../manual.md).\n\n")
    line = one_line(make_docs(tree))
    assert "guides/console.md" in line and "../manual.md" in line and line.startswith("docs: ")


def test_a_command_without_help_text_fails_naming_it(tree: Path) -> None:
    edit(tree / "appliance" / "cli" / "main.py", '"print the compatibility matrix"', '""')
    assert one_line(make_docs(tree)) == (
        "docs: command `appliance matrix` has no help text: give it one in appliance/cli/main.py COMMANDS"
    )


def test_a_config_key_without_a_description_fails_naming_it(tree: Path) -> None:
    schema = tree / "appliance" / "config" / "schema.py"
    edit(schema, '    """Port of the control API."""\n', "")
    line = one_line(make_docs(tree))
    assert line.startswith("docs: config key control.port has no description"), line
