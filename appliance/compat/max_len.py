"""The longest max_model_len vLLM derives from a checkpoint's config, as each vLLM version derives it.

vLLM refuses a longer --max-model-len at boot unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is set, so the
appliance derives the same value offline. The rules, by vLLM version (vllm/config/model.py
_get_and_verify_max_len; vllm/transformers_utils/model_arch_config_convertor.py
derive_max_model_len_and_key):

- the smallest of the length keys present in the text config; model_max_length, when present, replaces it;
- then the rope parameters' `factor` multiplies it, except for the rope types that already count it in
  (su, longrope, llama3; from 0.32.0 also the yarn variants, which leave max_position_embeddings scaled);
- before 0.32.0 a yarn rope starts from its original_max_position_embeddings instead;
- gemma3 model types skip rope scaling ("Gemma3's max_model_len (128K) is already scaled").

Only 0.26.0 and 0.32.0 were read: the yarn change is taken to arrive with 0.32.0.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from appliance.compat.checkpoint_config import LENGTH_KEYS, CheckpointConfig

__all__ = ["DerivedMax", "derive_max_len"]

_YARN_COUNTED_IN = Version("0.32.0")
_COUNTED_IN = ("su", "longrope", "llama3")
_YARN = ("yarn", "deepseek_yarn", "deepseek_llama_scaling")


@dataclass(frozen=True, slots=True)
class DerivedMax:
    """The derived maximum and how: the key it came from, and any rope factor applied."""

    tokens: int
    key: str


def derive_max_len(
    config: CheckpointConfig, vllm: str, rope: Mapping[str, Any] | None = None, lengths: Mapping[str, int] | None = None
) -> DerivedMax | None:
    """What vLLM `vllm` derives for `config`, with a rope override and length-key overrides (--hf-overrides)
    in force; None when the config records no length key (the check cannot judge it)."""
    found = {**_lengths(config), **(lengths or {})}
    if not found:
        return None
    key = "model_max_length" if "model_max_length" in found else min(found, key=found.__getitem__)
    tokens, how = float(found[key]), f"{key}={found[key]}"
    rope = rope if rope is not None else config.rope_scaling or config.other.get("rope_parameters")
    if rope and "gemma3" not in (config.model_type or ""):
        tokens, how = _scaled(tokens, how, rope, Version(vllm))
    return DerivedMax(int(tokens), how)


def _lengths(config: CheckpointConfig) -> dict[str, int]:
    found = {k: v for k in LENGTH_KEYS if isinstance(v := config.other.get(k), int)}
    if config.max_position_embeddings is not None:
        found["max_position_embeddings"] = config.max_position_embeddings
    return found


def _scaled(tokens: float, how: str, rope: Mapping[str, Any], vllm: Version) -> tuple[float, str]:
    excluded = _COUNTED_IN + (_YARN if vllm >= _YARN_COUNTED_IN else ())
    factor, kind = 1.0, ""
    for params in _per_layer_type(rope):
        rope_type = params.get("rope_type") or params.get("type")
        if rope_type in excluded:
            continue
        # A set without a factor keeps the one before; a null factor counts as 1.0; the last layer type's wins.
        factor, kind = params.get("factor", factor) or 1.0, str(rope_type)
        if rope_type == "yarn" and "original_max_position_embeddings" in params:
            tokens = float(params["original_max_position_embeddings"])
            how = f"original_max_position_embeddings={params['original_max_position_embeddings']}"
    return (tokens * factor, f"{how} x {kind} factor {factor:g}") if factor != 1.0 else (tokens, how)


def _per_layer_type(rope: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """One parameter set, or one per layer type (gemma4's rope_parameters by attention kind)."""
    if rope and all(isinstance(v, Mapping) for v in rope.values()):
        yield from rope.values()
    else:
        yield rope
