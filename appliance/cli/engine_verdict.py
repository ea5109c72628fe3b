"""The engine's own verdict on a plan, as `plan --probe` and `serve` print it (engines/config_probe.py asks)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.cli.common import err, out
from appliance.errors import ConfigError, Problem

if TYPE_CHECKING:
    from appliance.compat.matrix import CompatibilityMatrix
    from appliance.compat.validate import InstalledClasses, ValidatedConfig
    from appliance.config.schema import ComposedConfig
    from appliance.engines.config_probe import EngineVerdict
    from appliance.host.discovery import Board
    from appliance.plan import LaunchPlan

__all__ = [
    "ask_engine",
    "engine_accepts",
    "installed_classes",
    "print_verdict",
    "refused",
    "validated_for",
    "verdict_json",
    "verdict_lines",
]

# Effective values in the order an operator reads them, with the short name the summary line uses.
_SHOWN = (
    ("max_model_len", "max_model_len"),
    ("max_num_seqs", "max_num_seqs"),
    ("max_num_batched_tokens", "max_num_batched_tokens"),
    ("enable_chunked_prefill", "chunked_prefill"),
    ("enable_prefix_caching", "prefix_caching"),
    ("async_scheduling", "async_scheduling"),
    ("scheduler_cls", "scheduler"),
    ("data_parallel_size", "data_parallel"),
    ("speculative", "speculative"),
    ("disable_any_whitespace", "compact_json"),
    ("generation_config", "generation_config"),
    ("dtype", "dtype"),
    ("kv_cache_bytes", "kv_cache_bytes"),
)


def ask_engine(plan: LaunchPlan, boards: tuple[Board, ...] = (), lock_dir: Path | None = None) -> EngineVerdict:
    """Run the config-time probe in the plan's engine environment, saying so first (it takes seconds)."""
    from appliance.engines.config_probe import probe_config
    from appliance.runtime.spawn import engine_environment

    err.print(f"asking the engine's config code ({plan.python}) about this plan ...", markup=False)
    return probe_config(plan, engine_environment(plan, os.environ), boards, lock_dir)


def validated_for(args: argparse.Namespace, matrix: CompatibilityMatrix, probe: bool) -> ValidatedConfig:
    """The command line's config judged; with `probe`, by the installed class's capabilities where the tt-metal
    environment is (else by the records, as `validate` judges offline)."""
    from appliance.cli.common import composed_config, validated_config
    from appliance.compat.validate import validate

    if not probe:
        return validated_config(args, matrix)
    against = getattr(args, "against", None)
    composed = composed_config(args, matrix)
    return validate(composed, matrix, against=against, installed=installed_classes(composed, matrix, against))


def installed_classes(
    composed: ComposedConfig, matrix: CompatibilityMatrix, against: str | None = None
) -> InstalledClasses | None:
    """The class the plugin would load, read from the tt-metal environment where one is installed (None: not TT, or
    no environment here, and the records in models/ decide)."""
    from appliance.compat.validate import loaded_target
    from appliance.engines.config_probe import read_classes
    from appliance.plan import engine_python

    target = loaded_target(composed, matrix, against=against)
    if target is None:
        return None
    cfg = composed.config
    python = engine_python(cfg, "tt")
    if not Path(python).is_file():
        err.print(f"no tt-metal environment at {python}: the records in models/ decide the capabilities", markup=False)
        return None
    err.print(f"reading {target}'s model_capabilities in {python} ...", markup=False)
    return read_classes(python, (target,), {**os.environ, **cfg.engine.env}, cfg.engine.probe_timeout_s)


def engine_accepts(plan: LaunchPlan) -> None:
    """`serve`: the engine's config code must accept the plan before it spawns; a refusal is exit 2, nothing started.

    serve holds the device lock already, and the probe's process has exited before the engine opens a chip.
    """
    verdict = ask_engine(plan)
    print_verdict(verdict)
    if not verdict.accepted:
        raise refused(verdict)


def verdict_lines(verdict: EngineVerdict) -> list[str]:
    head = f"engine verdict (vLLM {verdict.vllm}, {verdict.elapsed_s:.1f}s):"
    if not verdict.accepted:
        return [f"{head} refused: {verdict.refusal}"]
    values = " ".join(f"{name}={_value(verdict.effective[key])}" for key, name in _SHOWN if key in verdict.effective)
    lines = [f"{head} accepted", f"  effective: {values}", *_media_line(verdict.effective)]
    lines += [f"  differs from the plan: {d.line()}" for d in verdict.differences]
    if not verdict.differences:
        lines.append("  as planned: every value the plan predicts is what the engine settled on")
    return lines + [f"  engine logged: {line}" for line in verdict.logged]


def _media_line(effective: Mapping[str, Any]) -> list[str]:
    """A vision engine's media policy as its own config and environment settled it (compat/media.py)."""
    if "allowed_local_media_path" not in effective:
        return []
    hosts = effective.get("allowed_media_domains")
    cap = effective.get("max_media_download_size_mb")
    return [
        f"  media: hosts={','.join(hosts) if hosts else 'any (the media gate refuses every one)'} "
        f"local_folder={effective['allowed_local_media_path']} "
        f"redirects={_value(effective.get('media_url_allow_redirects'))} "
        f"download_cap={f'{cap}MB' if cap is not None else 'none in this vLLM (the gate caps)'} "
        f"through={effective.get('media_proxy') or 'nothing'}"
    ]


def verdict_json(verdict: EngineVerdict) -> dict[str, Any]:
    from pydantic_core import to_jsonable_python

    data: dict[str, Any] = to_jsonable_python(verdict, fallback=dict)
    return data


def refused(verdict: EngineVerdict) -> ConfigError:
    """The engine's refusal as a config error (exit 2): the config asks for what the engine will not run."""
    message = f"vLLM {verdict.vllm}'s own config code refused this plan: {(verdict.refusal or '').rstrip('.')}"
    problem = Problem(
        code="engine-refused",
        key="engine",
        message=message,
        fix="Change the setting the refusal names; nothing was started",
    )
    return ConfigError((problem,))


def print_verdict(verdict: EngineVerdict) -> None:
    for line in verdict_lines(verdict):
        out.print(line, markup=False)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, dict):
        return ",".join(f"{k}:{v}" for k, v in value.items())
    return "none" if value is None else str(value)
