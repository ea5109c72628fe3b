"""The package layout the README documents, and explicit exports."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODULES = sorted(p for p in (ROOT / "appliance").glob("*.py") if p.name != "__init__.py")


def test_the_readme_module_table_lists_exactly_the_modules_that_exist() -> None:
    table = set(re.findall(r"^\| `(appliance/\w+\.py)` \|", (ROOT / "README.md").read_text(), flags=re.M))
    assert table == {f"appliance/{p.name}" for p in MODULES}


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_every_module_exports_exactly_its_public_api(path: Path) -> None:
    module = importlib.import_module(f"appliance.{path.stem}")
    exported = set(module.__all__)
    assert all(hasattr(module, name) for name in exported)
    defined = {
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(obj) or inspect.isfunction(obj))
        and getattr(obj, "__module__", None) == module.__name__
    }
    assert defined <= exported, f"public but not in __all__: {defined - exported}"


def test_the_appliance_never_imports_the_engine() -> None:
    for path in MODULES:
        source = path.read_text()
        assert not re.search(r"^\s*(import|from)\s+(vllm|torch)\b", source, flags=re.M), path.name
