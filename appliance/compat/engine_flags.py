"""The engine flags the appliance knows: one table, in the manner of vLLM's own `EngineArgs`.

Each row is one vLLM flag: the config key its value comes from, how the plan writes it, and whether
`engine.extra_args` may carry it. The plan writes its argv from the table (`command_args` over `PlannedFlags`),
validation refuses an extra_args flag a config key owns (`owned_flag`), the effective-capabilities reader reads an argv
back with it (`read_back`), and the docs reference is made from it. A vLLM flag rename is one edit here.

vLLM's argparse keeps the last of a repeated flag, so a flag in extra_args that the plan also wrote would silently win:
every flag the plan writes is refused there, by validation where a key always owns it, by the plan where the plan
writes it only in some configs (`unless-planned`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "FLAGS",
    "EngineFlag",
    "ExtraArgsRule",
    "FlagKind",
    "PlannedFlags",
    "WRITTEN",
    "command_args",
    "flag_row",
    "owned_flag",
    "read_back",
]

FlagKind = Literal["switch", "int", "number", "text", "json", "list", "secret"]
"""How a value is written: a switch is the flag or its `--no-` form; json is compact JSON with sorted keys; a list
is the flag then each value; a secret is never on the command line."""

ExtraArgsRule = Literal["refused", "unless-planned", "folded", "yours"]
"""What engine.extra_args may do with the flag: never carry it (its key owns it); carry it where the plan does not
write it; carry it to be folded into `tt.*` keys; carry it freely (the plan only reads it back)."""


@dataclass(frozen=True, slots=True)
class EngineFlag:
    """One vLLM flag: where its value comes from, how it is written, and who may set it."""

    flag: str
    key: str
    """The config key the value comes from (`engine.extra_args` for a flag only an operator sets)."""
    written: str
    """How the plan writes its value, as the docs reference says it."""
    kind: FlagKind
    extra_args: ExtraArgsRule = "refused"
    negative: str | None = None
    """A switch's off form."""
    aliases: tuple[str, ...] = ()
    probe: str | None = None
    """The engine config key the config-time probe shows for a flag the engine keeps as given."""

    @property
    def dest(self) -> str:
        """The field it sets: vLLM's argparse dest, and the `PlannedFlags` field of a flag the plan writes."""
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def names(self) -> tuple[str, ...]:
        """Every spelling on a command line."""
        return (self.flag, *((self.negative,) if self.negative else ()), *self.aliases)


_MEDIA = "the appliance's media gate policy (serving.allowed_media_domains, serving.local_media_dir)"

FLAGS: tuple[EngineFlag, ...] = (
    EngineFlag(
        "--model",
        "model.checkpoint",
        "the verified store folder, the built embedded model, a local path or the id",
        "text",
    ),
    EngineFlag("--served-model-name", "model.served_name", "as set, else model.checkpoint", "text"),
    EngineFlag("--host", "serving.host", "as set", "text"),
    EngineFlag("--port", "serving.port", "as set", "int"),
    EngineFlag("--max-model-len", "serving.max_context", "as set, else the matrix row's", "int"),
    EngineFlag(
        "--max-num-seqs",
        "serving.max_concurrency",
        "per data-parallel rank: max_concurrency (or the row's) ÷ data_parallel",
        "int",
    ),
    EngineFlag(
        "--enable-prefix-caching",
        "features.prefix_caching",
        "always, on or off",
        "switch",
        negative="--no-enable-prefix-caching",
    ),
    EngineFlag(
        "--async-scheduling", "features.async_decode", "always, on or off", "switch", negative="--no-async-scheduling"
    ),
    EngineFlag("--shutdown-timeout", "supervisor.shutdown_timeout_s", "whole seconds", "int"),
    EngineFlag("--data-parallel-size", "serving.data_parallel", "when above 1", "int", aliases=("-dp",)),
    EngineFlag(
        "--additional-config",
        "tt.*",
        'on engine=tt, {"tt": {...}} with every tt option (the row\'s, tt.*, and any given in engine.extra_args)',
        "json",
        extra_args="folded",
    ),
    EngineFlag(
        "--speculative-config",
        "features.speculative",
        '{"method": …, "num_speculative_tokens": features.speculative_tokens} unless off',
        "json",
    ),
    EngineFlag(
        "--scheduler-cls", "engine.scheduler", "the phased scheduler's class under engine.scheduler=phased", "text"
    ),
    EngineFlag(
        "--enable-chunked-prefill",
        "features.chunked_prefill",
        "off where it will run off (phased scheduler, a TT class that cannot resume a prefill); on where set on CPU",
        "switch",
        negative="--no-enable-chunked-prefill",
    ),
    EngineFlag(
        "--max-num-batched-tokens",
        "engine.scheduler, features.chunked_prefill",
        "with chunked prefill off, a whole-prompt budget: max(max_context, max_num_seqs)",
        "int",
        extra_args="unless-planned",
        probe="max_num_batched_tokens",
    ),
    EngineFlag(
        "--limit-mm-per-prompt",
        "serving.max_images_per_prompt",
        'a vision model\'s {"image": n, "video": 0}',
        "json",
    ),
    EngineFlag(
        "--mm-processor-kwargs",
        "serving.max_image_pixels",
        "a vision model's pixel cap, where its processor takes one",
        "json",
    ),
    EngineFlag(
        "--mm-processor-cache-gb",
        "the model family's images.processor_cache_gb (models/)",
        "where the family's record sets it",
        "number",
    ),
    EngineFlag(
        "--allowed-media-domains", "serving.allowed_media_domains", f"a vision model's listed hosts: {_MEDIA}", "list"
    ),
    EngineFlag(
        "--allowed-local-media-path",
        "serving.local_media_dir",
        f"a vision model's local folder (an empty one of the appliance's when unset): {_MEDIA}",
        "text",
    ),
    EngineFlag(
        "--api-key",
        "serving.api_key_env",
        "never on the command line: the engine reads VLLM_API_KEY from the variable serving.api_key_env names",
        "secret",
    ),
    EngineFlag(
        "--kv-cache-memory-bytes",
        "engine.extra_args",
        "yours; the effective capabilities read it back",
        "int",
        extra_args="yours",
    ),
    EngineFlag(
        "--dtype",
        "engine.extra_args",
        "yours; the plan expects the engine to keep it",
        "text",
        extra_args="yours",
        probe="dtype",
    ),
    EngineFlag(
        "--generation-config",
        "engine.extra_args",
        "yours; the plan expects the engine to keep it",
        "text",
        extra_args="yours",
        probe="generation_config",
    ),
    EngineFlag(
        "--block-size",
        "engine.extra_args",
        "yours; the plan expects the engine to keep it",
        "int",
        extra_args="yours",
        probe="block_size",
    ),
)

_BY_NAME = {name: row for row in FLAGS for name in row.names}


@dataclass(frozen=True, slots=True)
class PlannedFlags:
    """The values the plan gives the engine, one field per written row of `FLAGS` (None: not written)."""

    model: str
    served_model_name: str
    host: str
    port: int
    max_model_len: int
    max_num_seqs: int
    enable_prefix_caching: bool
    async_scheduling: bool
    shutdown_timeout: int
    data_parallel_size: int | None = None
    additional_config: Mapping[str, Any] | None = None
    speculative_config: Mapping[str, Any] | None = None
    scheduler_cls: str | None = None
    enable_chunked_prefill: bool | None = None
    max_num_batched_tokens: int | None = None
    limit_mm_per_prompt: Mapping[str, int] | None = None
    mm_processor_kwargs: Mapping[str, Any] | None = None
    mm_processor_cache_gb: float | None = None
    allowed_media_domains: tuple[str, ...] = ()
    allowed_local_media_path: str | None = None


WRITTEN = tuple(row for row in FLAGS if row.kind != "secret" and row.extra_args != "yours")
"""The rows the plan writes, each a field of `PlannedFlags` (tests/compat check the two agree)."""


def flag_row(name: str) -> EngineFlag | None:
    """The row of a flag as spelled on a command line (`--x` or `--x_y`), None for a flag the table lacks."""
    return _BY_NAME.get(name.replace("_", "-") if name.startswith("--") else name)


def owned_flag(name: str) -> EngineFlag | None:
    """The row of a flag engine.extra_args may never carry (a config key owns it), else None."""
    row = flag_row(name)
    return row if row is not None and row.extra_args == "refused" else None


def command_args(planned: PlannedFlags) -> list[str]:
    """The plan's own flags, in the table's order (engine.extra_args follow them in argv)."""
    args: list[str] = []
    for row in WRITTEN:
        args += _write(row, getattr(planned, row.dest))
    return args


def _write(row: EngineFlag, value: Any) -> list[str]:
    if value is None or value == ():
        return []
    if row.kind == "switch":
        return [row.flag if value else str(row.negative)]
    if row.kind == "list":
        return [row.flag, *value]
    if row.kind == "json":
        return [row.flag, json.dumps(dict(value), sort_keys=True)]
    return [row.flag, f"{value:g}" if row.kind == "number" else str(value)]


def read_back(argv: Sequence[str]) -> dict[str, Any]:
    """Each known flag's value in an argv, by dest, the last one winning as in vLLM's argparse; a value that does not
    parse as its kind is left out (unknown, not wrong)."""
    found: dict[str, Any] = {}
    for row, value in _occurrences(argv):
        parsed = _parse(row, value)
        if parsed is not None:
            found[row.dest] = parsed
    return found


def _occurrences(argv: Sequence[str]) -> Iterator[tuple[EngineFlag, str | list[str] | bool]]:
    for i, token in enumerate(argv):
        name, eq, inline = token.partition("=")
        row = flag_row(name) if token.startswith("-") else None
        if row is None:
            continue
        if row.kind == "switch":
            yield row, name.replace("_", "-") == row.flag
        elif eq:
            yield row, inline
        else:
            values = list(_values_after(argv, i))
            yield row, values if row.kind == "list" else (values[0] if values else "")


def _values_after(argv: Sequence[str], i: int) -> Iterator[str]:
    for token in argv[i + 1 :]:
        if token.startswith("-") and not token.lstrip("-").replace(".", "").isdigit():
            return
        yield token


def _parse(row: EngineFlag, value: str | list[str] | bool) -> Any:
    if isinstance(value, bool | list):
        return tuple(value) if isinstance(value, list) else value
    if row.kind == "int":
        return int(value) if value.isdigit() else None
    if row.kind == "number":
        try:
            return float(value)
        except ValueError:
            return None
    if row.kind == "json":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return None
    return value
