"""Build an engine environment from its pins, then record its manifest.

cpu runs build/cpu/install.sh (hash-locked requirements). tt follows the plugin's install recipe
(tenstorrent/vllm-tt-plugin@e3fc849 docs/install-vllm-tt.sh and docs/vllm-overrides.txt) with the
pinned versions: vLLM's common requirements with the numpy<2 / opencv override, vLLM itself from
source as the `empty` target with --no-deps, then the plugin at its commit, all inside the tt-metal
Python environment. A recipe is data, so --dry-run prints exactly what a build would run, on any host.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from appliance.config.schema import ComposedConfig, EngineKind
from appliance.engines.manifest import EnvironmentManifest, read_manifest, write_manifest
from appliance.engines.pins import BUILD_DIR, PinManifest, load_pins
from appliance.engines.steps import SetupStep, run_steps
from appliance.errors import ConfigError, LaunchError, Problem
from appliance.host.discovery import HostFacts
from appliance.resources import default_engines_dir

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["MANIFEST_NAME", "BuildRecipe", "BuildResult", "RunStep", "WriteStep", "build_recipe", "run_build"]

MANIFEST_NAME = "appliance-manifest.json"
_TT_ENV = "${TT_METAL_HOME}/python_env"  # tt-metal's create_venv.sh default, shown when it is unset
_VLLM_COMMON = "https://raw.githubusercontent.com/vllm-project/vllm/v{version}/requirements/common.txt"
_TORCH_CPU = "https://download.pytorch.org/whl/cpu"


@dataclass(frozen=True, slots=True)
class RunStep:
    title: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def shell(self) -> str:
        env = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
        return " ".join([*env, *(_quote(a) for a in self.argv)])


@dataclass(frozen=True, slots=True)
class WriteStep:
    title: str
    path: str
    content: str

    def shell(self) -> str:
        return f"cat > {_quote(self.path)} <<'EOF'\n{self.content}EOF"


Step = RunStep | WriteStep


@dataclass(frozen=True, slots=True)
class BuildRecipe:
    engine: EngineKind
    env_dir: str
    """The environment the steps build (the tt-metal Python env for tt)."""
    python: str
    manifest_path: str
    config_hash: str
    steps: tuple[Step, ...]
    log_dir: str
    """Where each step's output goes (`paths.log_dir`/build)."""

    def script(self) -> str:
        """The recipe as a shell script an operator could run by hand."""
        lines = ["set -euo pipefail"]
        for number, step in enumerate(self.steps, 1):
            lines += [f"# {number}. {step.title}", step.shell()]
        lines.append(f"# then: appliance writes the environment's manifest to {self.manifest_path}")
        return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class BuildResult:
    recipe: BuildRecipe
    manifest: EnvironmentManifest
    seconds: float


def build_recipe(composed: ComposedConfig, environ: Mapping[str, str] | None = None) -> BuildRecipe:
    """The steps that build `engine.kind`'s environment for this config."""
    env = os.environ if environ is None else environ
    cfg = composed.config
    kind = cfg.engine.kind
    if kind == "auto":
        raise ConfigError(
            (
                Problem(
                    code="build-engine", key="engine", message="build needs a concrete engine", fix="Use engine=cpu|tt"
                ),
            )
        )
    pins = load_pins(kind)
    engines = Path(cfg.paths.engines_dir) if cfg.paths.engines_dir else default_engines_dir(cfg.paths.cache_dir)
    if kind == "cpu":
        env_dir = str(engines / "cpu")
        steps: tuple[Step, ...] = (
            RunStep(
                "build the cpu engine venv from hash-locked pins",
                ("bash", str(BUILD_DIR / "cpu" / "install.sh"), env_dir),
                _uv_env(env),
            ),
        )
    else:
        env_dir = _tt_env_dir(cfg.engine.python, env)
        link = None if cfg.engine.python else str(engines / "tt")
        steps = _tt_steps(pins, env_dir, Path(cfg.paths.cache_dir) / "build" / "tt", link)
    return BuildRecipe(
        engine=kind,
        env_dir=env_dir,
        python=cfg.engine.python or f"{env_dir}/bin/python",
        manifest_path=f"{env_dir}/{MANIFEST_NAME}",
        config_hash=composed.config_hash,
        steps=steps,
        log_dir=str(Path(cfg.paths.log_dir) / "build"),
    )


def run_build(
    recipe: BuildRecipe, host: HostFacts, console: Console, environ: Mapping[str, str] | None = None
) -> BuildResult:
    """Run every step in order, each shown on `console` with its output in a log, then write the manifest.

    A failed step raises StepFailed naming the step, its last line and its log.
    """
    env = dict(os.environ if environ is None else environ)
    if recipe.engine == "tt":
        _require_tt_host(recipe, host, env)
    started = time.monotonic()
    for number, step in enumerate(recipe.steps, 1):
        if isinstance(step, WriteStep):
            Path(step.path).write_text(step.content)
            continue
        log = Path(recipe.log_dir) / f"{recipe.engine}-{number}.log"
        run_steps((SetupStep(f"{number}. {step.title}", step.argv, log, env | dict(step.env)),), console)
    manifest = read_manifest(recipe.engine, recipe.python, recipe.config_hash, host, env)
    write_manifest(manifest, Path(recipe.manifest_path))
    return BuildResult(recipe, manifest, time.monotonic() - started)


def _uv_env(env: Mapping[str, str]) -> Mapping[str, str]:
    """UV for install.sh: uv on PATH, else the one installed beside this interpreter (the appliance's `uv`)."""
    beside = Path(sys.executable).with_name("uv")
    found = shutil.which("uv", path=env.get("PATH")) or (str(beside) if beside.is_file() else "uv")
    return MappingProxyType({"UV": found})


def _tt_env_dir(python: str | None, env: Mapping[str, str]) -> str:
    if python:
        return str(Path(python).parent.parent)
    if env.get("PYTHON_ENV_DIR"):
        return env["PYTHON_ENV_DIR"]
    return f"{env['TT_METAL_HOME']}/python_env" if env.get("TT_METAL_HOME") else _TT_ENV


def _tt_steps(pins: PinManifest, env_dir: str, work: Path, link: str | None) -> tuple[Step, ...]:
    if pins.plugin is None:
        raise ConfigError(
            (Problem(code="pins-invalid", key="build/tt/pins.yaml", message="the tt engine needs a plugin pin"),)
        )
    py = f"{env_dir}/bin/python"
    version, plugin = pins.vllm.version, pins.plugin
    common, overrides = str(work / "vllm-common.txt"), str(work / "vllm-overrides.txt")
    uv = ("uv", "pip", "install", "--python", py)
    steps: list[Step] = [
        RunStep("work directories", ("mkdir", "-p", str(work), *([str(Path(link).parent)] if link else []))),
        RunStep(
            f"fetch vLLM {version}'s common requirements",
            ("curl", "-fsSL", _VLLM_COMMON.format(version=version), "-o", common),
        ),
        WriteStep(
            "overrides: numpy<2 for ttnn, and the versions that work beside it (build/tt/pins.yaml)",
            overrides,
            "".join(f"{name}{spec}\n" for name, spec in pins.overrides.items()),
        ),
        RunStep("vLLM's common requirements, with the overrides", (*uv, "--override", overrides, "-r", common)),
        *(
            [
                RunStep(
                    "what common.txt omits: CPU builds, no dependencies",
                    (
                        *uv,
                        "--no-deps",
                        "--index-url",
                        _TORCH_CPU,
                        *(f"{name}{spec}" for name, spec in pins.extras.items()),
                    ),
                )
            ]
            if pins.extras
            else []
        ),
        RunStep(
            f"vLLM {version} from source as the {pins.vllm.build_target} target, no dependencies",
            (*uv, "--no-deps", "--no-binary", "vllm", f"vllm=={version}"),
            MappingProxyType({"VLLM_TARGET_DEVICE": pins.vllm.build_target}),
        ),
        RunStep(
            f"{plugin.distribution} at {plugin.commit[:7]}",
            (*uv, f"{plugin.distribution} @ git+https://github.com/tenstorrent/vllm-tt-plugin@{plugin.commit}"),
        ),
    ]
    if pins.removed:
        steps.append(RunStep("remove what breaks imports", ("uv", "pip", "uninstall", "--python", py, *pins.removed)))
    steps.append(
        RunStep("check the imports", (py, "-I", "-c", "import ttnn, vllm, vllm_tt_plugin; print(vllm.__version__)"))
    )
    if link:
        steps.append(RunStep("point the plan's default tt interpreter at this env", ("ln", "-sfnT", env_dir, link)))
    return tuple(steps)


def _require_tt_host(recipe: BuildRecipe, host: HostFacts, env: Mapping[str, str]) -> None:
    """A tt build installs into the tt-metal env of a TT host; anywhere else only --dry-run makes sense."""
    where = "engine=tt builds only on a TT host inside the tt-metal environment"
    if not host.boards:
        raise LaunchError(f"{where}: /dev/tenstorrent has no devices here. Use --dry-run to print the steps")
    if not env.get("TT_METAL_HOME") or not Path(env["TT_METAL_HOME"]).is_dir():
        raise LaunchError(f"{where}: TT_METAL_HOME is not set to a tt-metal checkout")
    if not Path(recipe.python).is_file():
        raise LaunchError(f"{where}: {recipe.python} does not exist (run tt-metal's create_venv.sh first)")
    missing = [tool for tool in ("uv", "curl", "git") if shutil.which(tool, path=env.get("PATH")) is None]
    if missing:
        raise LaunchError(f"{where}: {', '.join(missing)} not found on PATH")


def _quote(arg: str) -> str:
    # The tt-metal placeholder must stay expandable when the printed script is run.
    return f'"{arg}"' if arg.startswith("${TT_METAL_HOME}") else shlex.quote(arg)
