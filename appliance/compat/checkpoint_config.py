"""What each checkpoint's config.json says about its length: models/checkpoints.yaml, or a local checkpoint's own file.

vLLM derives the longest max_model_len it allows from these keys (appliance/compat/max_len.py); the
data file records them per checkpoint with their source, and a local checkpoint's config.json, when
the directory is there to read, wins over its entry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from appliance.data_files import load_data_file
from appliance.errors import ConfigError, Problem

if TYPE_CHECKING:  # pydantic is imported where a schema is built: cached data is read back without it
    from pydantic import ConfigDict, TypeAdapter

__all__ = ["CHECKPOINTS_FILE", "CheckpointConfig", "is_local_path", "load_checkpoint_configs", "read_local_config"]

CHECKPOINTS_FILE = "checkpoints.yaml"
_FORBID: ConfigDict = {"extra": "forbid"}
# The keys of a config.json `other` keeps: what vLLM's max_model_len derivation reads besides
# max_position_embeddings and rope_scaling (vllm/transformers_utils/model_arch_config_convertor.py
# derive_max_model_len_and_key and vllm/config/model.py _get_and_verify_max_len, 0.26.0 and 0.32.0).
LENGTH_KEYS = (
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
_READ_KEYS = (*LENGTH_KEYS, "rope_parameters", "sliding_window")


@dataclass(frozen=True, slots=True)
class CheckpointConfig:
    """One checkpoint's length facts: its (text) config's keys, where they were read and how sure."""

    __pydantic_config__ = _FORBID

    architectures: tuple[str, ...] | None
    model_type: str | None
    max_position_embeddings: int | None
    rope_scaling: Mapping[str, Any] | None
    source: str | None
    status: Literal["verified", "unverified", "unknown"]
    text_config: bool = False
    """The values are the nested text_config's, which vLLM reads as the text config (multimodal checkpoints)."""
    other: Mapping[str, Any] = field(default_factory=dict)
    """Further keys of the text config vLLM reads: the other length keys, rope_parameters, sliding_window."""
    note: str | None = None


@dataclass(frozen=True, slots=True)
class _CheckpointsFile:
    __pydantic_config__ = _FORBID

    checkpoints: Mapping[str, CheckpointConfig]


@cache
def _file_adapter() -> TypeAdapter[_CheckpointsFile]:
    from pydantic import TypeAdapter

    return TypeAdapter(_CheckpointsFile)


def load_checkpoint_configs(path: Path) -> Mapping[str, CheckpointConfig]:
    """models/checkpoints.yaml by checkpoint name; a ConfigError names the file and key otherwise."""
    configs = load_data_file(path, _file_adapter(), "matrix", "checkpoint facts").checkpoints
    problems = [
        Problem(code="matrix-invalid", key=f"{path.name}:checkpoints.{name}", message=message)
        for name, config in configs.items()
        if (message := _inconsistency(config))
    ]
    if problems:
        raise ConfigError(tuple(problems))
    return configs


def _inconsistency(config: CheckpointConfig) -> str:
    if config.status == "unknown" and (config.source or config.max_position_embeddings or config.rope_scaling):
        return "an unknown entry has no source and null values"
    if config.status != "unknown" and not config.source:
        return f"a {config.status} entry names its source"
    return ""


def is_local_path(name: str) -> bool:
    """A checkpoint written as a path (/, ., ~) rather than a hub id."""
    return name.startswith(("/", ".", "~"))


def read_local_config(checkpoint: str) -> CheckpointConfig | Problem | None:
    """The config.json of a local checkpoint directory; None when the directory is not on this machine.

    validate is offline, so a fleet can judge a site's config where its weights are not: a directory
    that is absent leaves the data file's entry in force, but one that is there is read and wins.
    """
    folder = Path(checkpoint).expanduser()
    if not folder.is_dir():
        return None
    path = folder / "config.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        why = "missing" if isinstance(err, FileNotFoundError) else " ".join(str(err).split())
        return _unreadable(path, why)
    if not isinstance(raw, dict):
        return _unreadable(path, "not a JSON object")
    return _from_json(raw, path)


def _from_json(raw: dict[str, Any], path: Path) -> CheckpointConfig | Problem:
    """The text config's keys, as vLLM reads hf_text_config (a multimodal config nests them)."""
    nested = raw.get("text_config")
    text = nested if isinstance(nested, dict) else raw
    length, rope = text.get("max_position_embeddings"), text.get("rope_scaling")
    if not (length is None or isinstance(length, int)) or not (rope is None or isinstance(rope, dict)):
        return _unreadable(path, "max_position_embeddings must be an integer and rope_scaling an object")
    architectures = raw.get("architectures")
    return CheckpointConfig(
        architectures=tuple(architectures) if isinstance(architectures, list) else None,
        model_type=raw.get("model_type"),
        max_position_embeddings=length,
        rope_scaling=rope,
        source=f"local config.json at {path}",
        status="verified",
        text_config=text is nested,
        other={k: text[k] for k in _READ_KEYS if k in text},
    )


def _unreadable(path: Path, why: str) -> Problem:
    return Problem(
        code="checkpoint-config-invalid",
        key=str(path),
        message=f"the local checkpoint's config.json cannot be read: {why}",
        fix="Point model.checkpoint at a Hugging Face checkpoint folder with a valid config.json",
    )
