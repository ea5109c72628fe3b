"""serving.max_context against the checkpoint's own maximum, the one vLLM derives from its config.json.

vLLM refuses a longer max_model_len at boot ("User-specified max_model_len (X) is greater than the
derived max_model_len ...", vllm/config/model.py _get_and_verify_max_len, 0.26.0 and 0.32.0) unless
VLLM_ALLOW_LONG_MAX_MODEL_LEN is 1 or true (vllm/envs.py), and then only warns. tt-inference-server
serves its long rows with that variable (workflows/model_specs/prod/llm.yaml@11ac526, which the matrix
rows carry); a rope override (--rope-scaling, or rope_scaling/rope_parameters in --hf-overrides) raises
the derived maximum itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from appliance.compat.checkpoint_config import LENGTH_KEYS, CheckpointConfig, is_local_path, read_local_config
from appliance.compat.contract import flag_names
from appliance.compat.matrix import Checkpoint
from appliance.compat.max_len import DerivedMax, derive_max_len
from appliance.errors import Problem

__all__ = ["ALLOW_LONG", "check_checkpoint_context"]

ALLOW_LONG = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
_KEY = "serving.max_context"
_LENGTHS = ("max_position_embeddings", *LENGTH_KEYS)


def check_checkpoint_context(
    name: str, checkpoint: Checkpoint, context: int, env: Mapping[str, str], extra_args: tuple[str, ...], vllm: str
) -> Iterator[Problem]:
    """Refuse a context above what vLLM `vllm` derives for the checkpoint, unless the long-context variable is set."""
    config = read_local_config(name) if is_local_path(name) else None
    if isinstance(config, Problem):
        yield config
        return
    config = config or checkpoint.config
    allowed = env.get(ALLOW_LONG, "").strip().lower() in ("1", "true")
    derived = derive_max_len(config, vllm, *_overrides(extra_args)) if config else None
    if config is None or derived is None:
        if not allowed:
            yield _unjudged(checkpoint.checkpoint, config)
        return
    if context <= derived.tokens:
        return
    where = f"{checkpoint.checkpoint}'s derived maximum {derived.tokens} ({_basis(derived, config, vllm)})"
    if allowed:
        yield Problem(
            code="context-beyond-checkpoint",
            key=_KEY,
            message=f"serving.max_context={context} exceeds {where}; {ALLOW_LONG} lets vLLM serve it, but positions "
            "beyond the trained length may degrade the output",
            fix=f"Use serving.max_context ≤ {derived.tokens} unless the checkpoint is validated longer",
            severity="warning",
        )
        return
    yield Problem(
        code="context-above-checkpoint",
        key=_KEY,
        message=f"serving.max_context={context} exceeds {where}: vLLM refuses it at boot",
        fix=f"Use serving.max_context ≤ {derived.tokens}",
    )


def _basis(derived: DerivedMax, config: CheckpointConfig, vllm: str) -> str:
    # The citation without its description: a path@commit, an index id or the local file.
    citation = (config.source or "").split(" (")[0].split("; ")[0]
    return f"{derived.key} under vLLM {vllm}, {config.status} from {citation}"


def _unjudged(checkpoint: str, config: CheckpointConfig | None) -> Problem:
    why = "its length keys are unknown" if config else "it has no entry"
    return Problem(
        code="context-unjudged",
        key=_KEY,
        message=f"{checkpoint}'s maximum context cannot be derived: {why} in models/checkpoints.yaml; vLLM "
        "refuses a max_context above its config.json's at boot",
        fix=f"Record the checkpoint's config.json in models/checkpoints.yaml, or set engine.env.{ALLOW_LONG}=1",
        severity="warning",
    )


def _overrides(args: tuple[str, ...]) -> tuple[Mapping[str, Any] | None, dict[str, int]]:
    """The rope parameters and length keys engine.extra_args override (--rope-scaling, --hf-overrides JSON)."""
    rope: Mapping[str, Any] | None = None
    lengths: dict[str, int] = {}
    for flag, value in flag_names(args):
        parsed = _json_object(value)
        if flag == "--rope-scaling":
            rope = parsed
        elif flag == "--hf-overrides" and parsed:
            found = parsed.get("rope_scaling") or parsed.get("rope_parameters")
            rope = found if isinstance(found, dict) else rope
            lengths |= {k: v for k, v in parsed.items() if k in _LENGTHS and isinstance(v, int)}
    return rope, lengths


def _json_object(value: str | None) -> dict[str, Any] | None:
    """A flag's JSON object; anything else is vLLM's own argument error to report, not this check's."""
    try:
        parsed = json.loads(value or "")
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None
