"""Nothing under bench/ rots unseen, nor a make target the docs name.

Nothing imports the bench scripts and they run only by hand (`make bench`, `make soak`), so a renamed function or
flag they use broke them silently (issue 55: `make soak` died at its first import). Here every script is
imported and parses `--help`, in this process (the fast tier) or, for a script that runs in the CPU engine's
interpreter (it imports vLLM), in that interpreter (the engine tier); every flag the Makefile, the docs and the
scripts' own usage lines pass a script must be in its help. mypy --strict checks bench/ as well (`make lint`).
"""

from __future__ import annotations

import ast
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.paths import ROOT

SCRIPTS = sorted(p for p in (ROOT / "bench").glob("*.py") if p.name != "__init__.py")
DOCS = [ROOT / "Makefile", ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *SCRIPTS]
INVOCATION = re.compile(r"bench/(\w+)\.py((?:[ \t]+[^\s`;|&)]+)*)")
"""A script's path and its arguments, up to the end of the code span, line or shell command."""
FLAG = re.compile(r"(?<![\w-])--[a-z][\w-]*")
MAKE_MENTION = re.compile(r"`make ([a-z][\w-]*)|^make ([a-z][\w-]*)", re.M)
"""`make TARGET` in inline code, or a code block's line (the README's command list); prose is left alone."""
RUN_FOR_REAL = {"test"}
"""Targets CI runs whole (.ci/run), and that `make -n` cannot check: it runs every recipe line naming $(MAKE)."""

HELP_EACH = """
import runpy, sys
for script in sys.argv[1:]:
    sys.argv = [script, "--help"]
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as done:
        if done.code not in (0, None):
            raise
    else:
        raise SystemExit(f"{script} --help ran the script: it parses no arguments")
    print("\\f", flush=True)
"""
"""Run in the engine's interpreter: each script's --help, its output ended by a form feed."""


def tree(script: Path) -> ast.Module:
    return ast.parse(script.read_text(), str(script))


def imports_vllm(module: ast.Module) -> bool:
    """Whether the module imports vLLM at its top level, so it can run only in an engine's interpreter."""
    names = [a.name for n in module.body if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in module.body if isinstance(n, ast.ImportFrom)]
    return any(name.split(".")[0] == "vllm" for name in names)


def engine_sources(module: ast.Module) -> list[ast.Module]:
    """The module's string constants that are Python importing vLLM: code it writes out for an engine to run."""
    texts = [n.value.value for n in module.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)]
    sources = []
    for text in (t for t in texts if isinstance(t, str)):
        try:
            sources.append(ast.parse(text))
        except SyntaxError:
            continue  # a template or prose, not code
    return [s for s in sources if imports_vllm(s)]


def method_calls(module: ast.Module) -> set[str]:
    return {n.func.attr for n in ast.walk(module) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}


ENGINE_SIDE = [p for p in SCRIPTS if imports_vllm(tree(p))]
APP_SIDE = [p for p in SCRIPTS if p not in ENGINE_SIDE]


def documented_flags(script: Path) -> dict[str, str]:
    """Every flag passed to `script` in the Makefile, the docs and bench/'s usage lines, with where."""
    flags: dict[str, str] = {}
    for doc in DOCS:
        for line_no, line in enumerate(doc.read_text().splitlines(), 1):
            for name, args in INVOCATION.findall(line):
                if name == script.stem:
                    flags |= {flag: f"{doc.relative_to(ROOT)}:{line_no}" for flag in FLAG.findall(args)}
    return flags


def assert_documented_flags_exist(script: Path, help_text: str) -> None:
    offered = set(FLAG.findall(help_text.split("\n\n")[0]))  # the usage lines: the description may quote flags
    missing = {flag: where for flag, where in documented_flags(script).items() if flag not in offered}
    assert not missing, f"bench/{script.name} has no such flag: {missing}"


@pytest.mark.parametrize("script", APP_SIDE, ids=lambda p: p.name)
def test_a_bench_script_imports_and_parses_its_help_and_every_flag_passed_to_it(
    script: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Without a parser, --help would run the whole measurement inside the test.
    assert "parse_args" in method_calls(tree(script)), f"bench/{script.name} parses no arguments"
    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(script), run_name="__main__")
    assert done.value.code in (0, None)
    help_text = capsys.readouterr().out
    assert help_text.startswith("usage:")
    assert_documented_flags_exist(script, help_text)


def test_the_engine_side_bench_code_imports_and_parses_its_help_in_the_engine_interpreter(cpu_engine: Path) -> None:
    sources = [s for p in APP_SIDE for s in engine_sources(tree(p))]
    imports = [ast.unparse(n) for s in sources for n in s.body if isinstance(n, ast.Import | ast.ImportFrom)]
    assert ENGINE_SIDE or imports, "nothing engine-side found: this test would check nothing"
    program = "\n".join([*imports, HELP_EACH])
    done = subprocess.run(
        [str(cpu_engine), "-I", "-c", program, *map(str, ENGINE_SIDE)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    helps = done.stdout.split("\f")[:-1]
    assert len(helps) == len(ENGINE_SIDE)
    for script, help_text in zip(ENGINE_SIDE, helps, strict=True):
        assert "usage:" in help_text, f"bench/{script.name}: {help_text[:300]}"
        assert_documented_flags_exist(script, help_text)


def named_make_targets() -> set[str]:
    texts = [(ROOT / "README.md").read_text(), *(p.read_text() for p in (ROOT / "docs").rglob("*.md"))]
    return {a or b for text in texts for a, b in MAKE_MENTION.findall(text)}


def test_every_make_target_the_docs_name_is_listed_with_its_check_and_expands() -> None:
    named = named_make_targets()
    page = (ROOT / "docs" / "development" / "tests.md").read_text()
    listed = set(re.findall(r"^\| `make ([\w-]+)`", page, flags=re.M))
    assert named <= listed, f"docs/development/tests.md does not say what exercises: {sorted(named - listed)}"
    # -n prints each recipe, its prerequisites' included, and fails on a target or file no rule makes.
    checked = sorted(named - RUN_FOR_REAL)
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", *checked], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
