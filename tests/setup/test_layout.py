"""The package layout docs/development/architecture.md documents, explicit exports, and a plain install.

Which package may import which is import-linter's job (`[tool.importlinter]` in pyproject.toml,
run by `make lint`); these tests cover what it cannot see.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil
import re
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

import appliance
from testkit.paths import ROOT

PACKAGE = ROOT / "appliance"
MODULES = sorted(
    m.name for m in pkgutil.walk_packages(appliance.__path__, "appliance.") if m.name != "appliance.cli.__main__"
)


def test_the_architecture_page_package_table_lists_exactly_the_packages_and_root_modules() -> None:
    page = ROOT / "docs" / "development" / "architecture.md"
    table = set(re.findall(r"^\| `(appliance/[\w.]+/?)` \|", page.read_text(), flags=re.M))
    packages = {f"appliance/{p.name}/" for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    modules = {f"appliance/{p.name}" for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    assert table == packages | modules


def test_the_package_root_keeps_only_a_handful_of_modules() -> None:
    assert len(list(PACKAGE.glob("*.py"))) <= 8


@pytest.mark.parametrize("name", MODULES)
def test_every_module_exports_exactly_its_public_api(name: str) -> None:
    module = importlib.import_module(name)
    if not hasattr(module, "__all__"):
        assert module.__file__ is not None and module.__file__.endswith("__init__.py"), f"{name} has no __all__"
        return
    exported = set(module.__all__)
    assert all(hasattr(module, n) for n in exported)
    defined = {
        n
        for n, obj in vars(module).items()
        if not n.startswith("_")
        and (inspect.isclass(obj) or inspect.isfunction(obj))
        and getattr(obj, "__module__", None) == module.__name__
    }
    assert defined <= exported, f"public but not in __all__: {defined - exported}"


CONSOLE_MAY_IMPORT = {
    "appliance.control.client",
    "appliance.control.gateway_view",  # the client's reading of the gateway's exporter page
    "appliance.control.documents",
    "appliance.control.tls",
    "appliance.control.board_documents",
    "appliance.control.upgrade_documents",
    "appliance.config.schema",
    "appliance.config.bounds",
    "appliance.errors",
}


def test_the_console_contract_forbids_all_of_the_package_but_the_client_its_documents_and_the_config_types() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    console = next(c for c in contracts if c.get("source_modules") == ["tui"])
    opened = {m.rsplit(".", 1)[0] for m in CONSOLE_MAY_IMPORT if m.count(".") == 2}  # packages allowed in part

    def part(module: str) -> str:
        """What the contract names: a root module or package, or a module of a package allowed in part."""
        pieces = module.split(".")
        return ".".join(pieces[:3] if ".".join(pieces[:2]) in opened else pieces[:2])

    parts = {part(m) for m in MODULES} - opened - CONSOLE_MAY_IMPORT
    assert {m for m in console["forbidden_modules"] if m.startswith("appliance")} == parts


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`pip install .` (not editable) into a fresh venv; its dependencies come from this venv's site-packages.

    Only the .pth's directory is added: this venv's editable finder is not installed there, so the
    new venv imports the appliance from its own site-packages, as any user's install would.
    """
    target = tmp_path_factory.mktemp("plain-install") / "venv"
    venv.create(target, with_pip=True)
    site = next(target.glob("lib/python*/site-packages"))
    here = next(p for p in sys.path if p.endswith("site-packages") and Path(p, "hydra").is_dir())
    (site / "appliance-deps.pth").write_text(here + "\n")
    pip = [str(target / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", "--no-build-isolation", str(ROOT)], check=True, capture_output=True)
    return target


def run_installed(venv_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    return subprocess.run(
        [str(venv_dir / "bin" / "appliance"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_a_plain_install_reads_its_data_from_the_package_not_the_checkout(installed: Path, tmp_path: Path) -> None:
    where = subprocess.run(
        [str(installed / "bin" / "python"), "-c", "import appliance.resources as r; print(r.conf_dir())"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(installed)) and where.endswith("appliance/_data/conf")


@pytest.mark.parametrize(
    "args",
    # validate judges what serve would refuse here too: the engine's interpreter must exist (any Python does).
    [
        ("validate", "engine.python={installed}/bin/python"),
        ("plan", "+model=llama", "mesh=t3k"),
        ("matrix", "--json"),
        ("options",),
    ],
    ids=["validate", "plan", "matrix", "options"],
)
def test_a_plain_install_works_from_an_unrelated_directory(
    installed: Path, tmp_path: Path, args: tuple[str, ...]
) -> None:
    done = run_installed(installed, tmp_path, *(a.format(installed=installed) for a in args))
    assert done.returncode == 0, done.stderr
    assert str(ROOT) not in done.stdout
    if args[0] == "matrix":
        assert {row["family"] for row in json.loads(done.stdout)} >= {"llama", "qwen", "tiny"}
    if args[0] == "plan":
        assert "--additional-config" in done.stdout and "MESH_DEVICE=T3K" in done.stdout


def test_every_command_a_message_names_exists() -> None:
    from appliance.cli.main import _parser

    commands = set(next(a for a in _parser()._actions if a.dest == "command" or a.choices).choices or ())
    named = {
        m
        for path in [*PACKAGE.rglob("*.py"), *(ROOT / "tui").rglob("*.py")]
        for m in re.findall(r"`appliance ([a-z][a-z-]*)", path.read_text())
    }
    assert named and named <= commands, named - commands
