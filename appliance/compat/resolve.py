"""Resolve `mesh=auto` and `engine=auto` into concrete options before validation.

Only this step looks at the host. It picks the options before composing (from the group choices
alone, see config/choices.py) and composes once with them, so the result is exactly what an operator
would get by typing them, including each option's own settings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from appliance.compat.matrix import CompatibilityMatrix
from appliance.config.choices import group_choices, mesh_arch
from appliance.config.compose import compose_config, group_selections, mesh_catalog
from appliance.config.schema import ComposedConfig
from appliance.errors import ConfigError, Problem

if TYPE_CHECKING:  # only mesh=auto looks at the host, through the callable it is given
    from appliance.host.discovery import HostFacts

__all__ = ["mesh_for_host", "resolve_config"]


def resolve_config(
    overrides: Sequence[str],
    matrix: CompatibilityMatrix,
    host_facts: Callable[[], HostFacts],
    *,
    site_dir: Path | None = None,
) -> ComposedConfig:
    """Pin mesh=auto to the host's boards and engine=auto to the mesh, then compose once.

    `host_facts` is called only for mesh=auto, so every other config resolves offline.
    """
    # Choices first, from the group selections alone: value overrides may name keys that only the
    # resolved options have (e.g. ~engine.env.VLLM_CPU_KVCACHE_SPACE needs engine=cpu).
    choices = group_choices(group_selections(overrides), site_dir=site_dir)
    extra: list[str] = []
    mesh = choices.get("mesh")
    if mesh == "auto":
        mesh = mesh_for_host(host_facts())
        extra.append(f"mesh={mesh}")
    if choices.get("engine") == "auto" and mesh is not None:
        extra.append(f"engine={'cpu' if mesh_arch(mesh) == 'cpu' else 'tt'}")
    composed = compose_config([*overrides, *extra], site_dir=site_dir)
    if "mesh=cpu" in extra:
        _require_cpu_row(composed, matrix)
    return composed


def mesh_for_host(host: HostFacts) -> str:
    """The mesh option whose board type and count match the host; cpu when there are no boards."""
    if not host.boards:
        return "cpu"
    for name, mesh in mesh_catalog().items():
        # A Galaxy is one board whose chips are each a device node: count what /dev/tenstorrent lists.
        if mesh.board_name == host.board_type and (mesh.devices or mesh.boards) == len(host.boards):
            return name
    kinds = ", ".join(sorted({b.card_type or "unknown" for b in host.boards}))
    raise ConfigError(
        (
            Problem(
                code="mesh-auto-unmatched",
                key="mesh",
                message=f"found {len(host.boards)} board(s) of type {kinds}; no mesh option matches",
                fix="Choose the mesh explicitly, e.g. mesh=n300",
            ),
        )
    )


def _require_cpu_row(composed: ComposedConfig, matrix: CompatibilityMatrix) -> None:
    found = matrix.find(composed.config.model.checkpoint)
    if found is None or found[1].row("cpu") is None:
        model = composed.config.model
        raise ConfigError(
            (
                Problem(
                    code="no-tt-device",
                    key="mesh",
                    message="no Tenstorrent device found on this host (/dev/tenstorrent is empty), "
                    f"and +model={model.family} "
                    f"({model.checkpoint}) needs a TT mesh",
                    fix="Run `appliance serve` with no model for the embedded CPU default, or check the config offline "
                    f"with `appliance validate +model={model.family} mesh=<n150|n300|t3k|...>`",
                ),
            )
        )
