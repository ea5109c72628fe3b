"""Apply a recorded vllm-tt-plugin state (build/tt/plugin-states/) to the `tt` keys, env and raw flags.

The plugin validates much of this only inside the worker after minutes of boot, passes some values to
ttnn unchecked, and silently drops others; these checks say so up front. The rules are data: this module
knows how to apply a kind of rule, the state file says which rules hold at that plugin commit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from appliance.compat.engine_flags import owned_flag
from appliance.compat.state_set import PluginStates
from appliance.compat.states import PluginState, TtKey
from appliance.errors import Problem

__all__ = [
    "ExtraArgs",
    "check_extra_args",
    "check_tt_env",
    "check_tt_options",
    "extra_args_without",
    "cpu_kv_cache_bytes",
    "flag_names",
    "kv_dtype_scale",
    "split_additional_config",
    "unsupported_at",
]

_ADDITIONAL = "--additional-config"


@dataclass(frozen=True, slots=True)
class ExtraArgs:
    """`engine.extra_args` with `--additional-config` (JSON or dotted) folded out into `tt` keys."""

    args: tuple[str, ...]
    tt: Mapping[str, Any]
    forms: tuple[str, ...]
    problems: tuple[Problem, ...]


def unsupported_at(states: PluginStates, state: PluginState, surface: str) -> str:
    """`not supported by vllm-tt-plugin at <commit> (vLLM x); supported from <commit> (vLLM y)`."""
    newer = states.newer_supporting(state, surface)
    later = f"; supported from {newer.label}" if newer else "; no recorded state supports it"
    return f"not supported by vllm-tt-plugin at {state.label}{later}"


def check_tt_options(tt: Mapping[str, Any], state: PluginState, states: PluginStates) -> Iterator[Problem]:
    """Type and enum of every `tt` key, including those the plugin checks only in the worker."""
    for key, value in tt.items():
        where, rule = f"tt.{key}", state.tt_keys.get(key)
        if rule is None:
            yield _unknown_tt_key(key, state, states)
            continue
        problem = _tt_value_problem(where, value, rule)
        if problem is not None:
            yield _with_rule(problem, f"tt.{key}", rule.status, state)


def _unknown_tt_key(key: str, state: PluginState, states: PluginStates) -> Problem:
    where = f"tt.{key}"
    if key.startswith("_tt_"):
        return Problem(
            code="tt-config-key",
            key=where,
            message="reserved key the plugin writes itself",
            fix=f"Remove {where}; use serving.data_parallel for data parallelism",
            change=_drop(where),
        )
    newer = states.newer_supporting(state, f"tt:{key}")
    if newer is not None:
        return Problem(
            code="unsupported-feature",
            key=where,
            message=unsupported_at(states, state, f"tt:{key}"),
            fix=f"Remove {where} or validate --against vllm={newer.vllm}",
            change=_drop(where),
        )
    usable = sorted(k for k, r in state.tt_keys.items() if r.kind not in ("owned", "multi_host", "legacy"))
    return Problem(
        code="tt-config-key",
        key=where,
        message=f"not a key vllm-tt-plugin at {state.label} reads",
        fix=f"Remove {where}; the keys it reads: {', '.join(usable)}",
        change=_drop(where),
    )


def _tt_value_problem(where: str, value: Any, rule: TtKey) -> Problem | None:
    """The problem with one value under its rule, or None; the plugin's own refusal is quoted."""
    said = f"the plugin {_when(rule)}: {rule.refusal.format(value=value)}"
    if rule.kind == "enum" and value not in rule.values:
        return Problem(
            code="tt-config-value",
            key=where,
            message=f"{value!r} is not one of {', '.join(rule.values)}; {said}",
            fix=f"Set {where} to one of {', '.join(rule.values)}, or remove it",
            change=_drop(where),
        )
    if rule.kind in ("bytes", "positive_int") and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        what = "byte count" if rule.kind == "bytes" else "integer"
        return Problem(
            code="tt-config-value",
            key=where,
            message=f"{value!r} is not a positive {what}; {said}",
            fix=f"Set {where} to a positive integer, or remove it",
            change=_drop(where),
        )
    if rule.kind == "bool" and not isinstance(value, bool):
        return Problem(
            code="tt-config-value",
            key=where,
            message=f"{value!r} is not a boolean; {said}",
            fix=f"Set {where}=true or false, or remove it",
            change=_drop(where),
        )
    if rule.kind == "false_only" and value is not False:
        return Problem(code="tt-config-value", key=where, message=said, fix=f"Remove {where}", change=_drop(where))
    if rule.kind == "owned":
        return Problem(
            code="tt-config-key",
            key=where,
            message=f"set by the {rule.owner} config group",
            fix=f"Remove {where} and use {rule.owner}=performance|accuracy",
            change=_drop(where),
        )
    if rule.kind == "multi_host":
        return Problem(
            code="unsupported-feature",
            key=where,
            message=said,
            fix=f"Remove {where}; serve one host per appliance",
            change=_drop(where),
        )
    if rule.kind == "legacy":
        return Problem(
            code="tt-config-key",
            key=where,
            message=f"legacy key: {rule.refusal}",
            fix=f"Remove {where}; use serving.data_parallel for data parallelism",
            change=_drop(where),
        )
    return None


def _drop(key: str) -> tuple[str, ...]:
    """The override that removes `key` from the config (Hydra's `~key`)."""
    return (f"~{key}",)


def _when(rule: TtKey) -> str:
    return {
        "config": "refuses it at config time",
        "worker": "refuses it only in the worker, after boot began",
        "never": "does not check it",
    }[rule.checked]


def check_tt_env(env: Mapping[str, str], state: PluginState, states: PluginStates) -> Iterator[Problem]:
    """The plugin-read variables (TT_*_TEXT_VER, MESH_DEVICE, ...) whose bad values fail in every process."""
    for name, value in env.items():
        rule, where = state.env.get(name), f"engine.env.{name}"
        if rule is None:
            if states.newer_supporting(state, f"env:{name}") is not None:
                yield Problem(
                    code="unsupported-feature",
                    key=where,
                    message=f"{name} is read by nobody here: {unsupported_at(states, state, f'env:{name}')}",
                    fix=f"Remove {name}",
                    rule=f"feature.{_feature_for_env(name)}",
                    change=_drop(where),
                )
            continue
        if not _env_value_ok(rule.format, value, rule.values, rule.grid):
            allowed = ", ".join(rule.values) + (" or a '(rows, cols)' grid" if rule.grid else "")
            fix = f"Use one of {allowed}" if rule.values else "Write Arch=module.path:ClassName[,...]"
            problem = Problem(
                code="tt-env-value",
                key=where,
                message=f"{value!r}: {rule.refusal.format(value=value)}",
                fix=f"{fix}, or remove it",
                change=_drop(where),
            )
            yield _with_rule(problem, f"env.{name}", rule.status, state)


def _feature_for_env(name: str) -> str:
    return "model_class_overrides" if name == "TT_MODEL_CLASS_OVERRIDES" else name.lower()


def _env_value_ok(form: str, value: str, allowed: tuple[str, ...], grid: bool) -> bool:
    if form == "class_overrides":
        entries = [e.strip() for e in value.split(",") if e.strip()]
        return all("=" in e and ":" in e.partition("=")[2] and e.partition("=")[0].strip() for e in entries)
    return value in allowed or (grid and _is_grid(value))


def check_extra_args(args: tuple[str, ...], engine: str, state: PluginState | None) -> Iterator[Problem]:
    """Raw vLLM flags: none the plan owns, none the pinned TT engine refuses."""
    if args and not args[0].startswith("-"):
        yield Problem(
            code="extra-args",
            key="engine.extra_args",
            message=f"{args[0]!r} is not a flag",
            fix="Pass flags such as ['--max-logprobs', '5'] or ['--max-logprobs=5']",
        )
    refused = {f: (k, r) for k, r in (state.features.items() if state and engine == "tt" else ()) for f in r.flags}
    for flag, value in flag_names(args):
        if flag in refused:
            yield from _refused_flag(flag, value, *refused[flag], state, args)
        elif (owner := owned_flag(flag)) is not None:
            yield Problem(
                code="flag-owned-by-config",
                key="engine.extra_args",
                message=f"{flag} is set from {owner.key}",
                fix=f"Remove {flag} and set {owner.key} instead",
                change=extra_args_without(args, flag),
            )


def extra_args_without(args: tuple[str, ...], flag: str) -> tuple[str, ...]:
    """The override that sets engine.extra_args to `args` less `flag` and its value (a user's fix: drop the flag)."""
    dropped: set[int] = set()
    for i, token in enumerate(args):
        name, eq, _ = token.partition("=")
        if token.startswith("-") and name.replace("_", "-") == flag:
            dropped.add(i)
            if not eq and i + 1 < len(args) and not args[i + 1].startswith("--"):
                dropped.add(i + 1)  # its value
    kept = [token for i, token in enumerate(args) if i not in dropped]
    return ("engine.extra_args=[" + ",".join(json.dumps(t) for t in kept) + "]",)


def _refused_flag(
    flag: str, value: str | None, key: str, rule: Any, state: PluginState | None, args: tuple[str, ...]
) -> Iterator[Problem]:
    if value is not None and value in rule.allowed:
        return
    if key == "max_logprobs" and state is not None:
        if value is not None and value.isdigit() and int(value) > state.max_logprobs:
            yield _with_rule(
                Problem(
                    code="unsupported-feature",
                    key="engine.extra_args",
                    message=f"--max-logprobs {value} exceeds the TT limit of {state.max_logprobs}: {rule.refusal}",
                    fix=f"Use --max-logprobs {state.max_logprobs} or less",
                    change=extra_args_without(args, flag),
                ),
                "feature.max_logprobs",
                rule.status,
                state,
            )
        return
    label = state.label if state else "this state"
    yield _with_rule(
        Problem(
            code="unsupported-feature",
            key="engine.extra_args",
            message=f"{flag}: {rule.reason} is not supported by vllm-tt-plugin at {label} ({rule.refusal})",
            fix=f"Remove {flag} for engine=tt",
            change=extra_args_without(args, flag),
        ),
        f"feature.{key}",
        rule.status,
        state,
    )


def split_additional_config(args: tuple[str, ...], state: PluginState | None) -> ExtraArgs:
    """Fold `--additional-config '{"tt": ...}'` and `--additional-config.tt.X v` out of raw args into tt keys.

    vLLM turns dotted keys into one JSON argument appended last, which replaces any earlier JSON one
    wholesale; the plan therefore passes a single merged `--additional-config` instead of either.
    """
    kept: list[str] = []
    tt: dict[str, Any] = {}
    forms: list[str] = []
    problems: list[Problem] = []
    skip = False
    for i, token in enumerate(args):
        if skip:
            skip = False
            continue
        name, eq, inline = token.partition("=")
        # vLLM turns underscores into dashes only up to the first dot: the nested keys keep theirs.
        head, dot, rest = name.partition(".")
        normal = (head.replace("_", "-") if name.startswith("--") else head) + dot + rest
        if normal != _ADDITIONAL and not normal.startswith(_ADDITIONAL + "."):
            kept.append(token)
            continue
        value = inline if eq else (args[i + 1] if i + 1 < len(args) else None)
        skip = not eq
        form = "json" if normal == _ADDITIONAL else "dotted"
        forms.append(form)
        parsed, problem = _parse_form(form, normal, value)
        problems += [problem] if problem else []
        tt.update(parsed)
    if state is not None:
        problems += [_form_refused(f, state) for f in dict.fromkeys(forms) if f not in state.additional_config_forms]
    return ExtraArgs(tuple(kept), tt, tuple(dict.fromkeys(forms)), tuple(problems))


def _parse_form(form: str, flag: str, value: str | None) -> tuple[dict[str, Any], Problem | None]:
    where = "engine.extra_args"
    if value is None:
        return {}, Problem(code="extra-args", key=where, message=f"{flag} has no value", fix=f"Pass {flag} <value>")
    if form == "dotted":
        path = flag.removeprefix(_ADDITIONAL + ".").split(".")
        if path[0] != "tt" or len(path) != 2:
            return {}, Problem(
                code="tt-config-key",
                key=where,
                message=f"{flag}: vllm-tt-plugin reads only additional_config['tt'][key]",
                fix="Write --additional-config.tt.<key> <value>",
                rule="additional_config.forms",
            )
        return {path[1]: _dotted_value(value)}, None
    try:
        data = json.loads(value)
    except json.JSONDecodeError as err:
        return {}, Problem(
            code="extra-args",
            key=where,
            message=f"{flag}: not JSON ({err.msg})",
            fix="""Pass '{"tt": {...}}'""",
            rule="additional_config.forms",
        )
    if not isinstance(data, dict) or not isinstance(data.get("tt", {}), dict) or set(data) - {"tt"}:
        return {}, Problem(
            code="tt-config-key",
            key=where,
            message=f'{flag}: additional_config must be {{"tt": {{...}}}} for TT',
            fix="Set tt.<key> instead",
            rule="additional_config.forms",
        )
    return dict(data.get("tt", {})), None


def _dotted_value(text: str) -> Any:
    """vLLM reads a dotted value as JSON when it parses, else as the literal string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _form_refused(form: str, state: PluginState) -> Problem:
    return Problem(
        code="extra-args",
        key="engine.extra_args",
        message=f"the {form} form of --additional-config is not read at {state.label}",
        fix="Set tt.<key> instead",
        rule="additional_config.forms",
    )


def cpu_kv_cache_bytes(args: tuple[str, ...], env: Mapping[str, str]) -> int | None:
    """KV-cache memory the CPU engine will use, if set explicitly.

    vLLM's CPU platform lets VLLM_CPU_KVCACHE_SPACE (whole GiB) overwrite --kv-cache-memory-bytes.
    """
    space = env.get("VLLM_CPU_KVCACHE_SPACE", "")
    if space:
        return int(space) << 30 if space.isdigit() else None
    explicit = dict(flag_names(args)).get("--kv-cache-memory-bytes")
    return int(explicit) if explicit is not None and explicit.isdigit() else None


def kv_dtype_scale(args: tuple[str, ...]) -> int:
    """KV bytes per token relative to bfloat16 (the matrix's unit) under the engine's --dtype."""
    return 2 if dict(flag_names(args)).get("--dtype") in ("float32", "float") else 1


def flag_names(args: tuple[str, ...]) -> Iterator[tuple[str, str | None]]:
    """(normalized flag, its value or None) for each flag in a raw argv fragment."""
    for i, token in enumerate(args):
        if not token.startswith("-") or _is_number(token):
            continue
        name, eq, inline = token.partition("=")
        following = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
        yield name.replace("_", "-"), inline if eq else following


def _with_rule(problem: Problem, rule: str, status: str, state: PluginState | None) -> Problem:
    """Attach the rule id; an unverified rule only warns, naming its doubt."""
    if status == "unverified" and problem.severity == "error":
        label = state.label if state else ""
        message = f"{problem.message} (unverified at {label}: the records disagree or name no commit)"
        return replace(problem, message=message, severity="warning", rule=rule)
    return replace(problem, rule=rule)


def _is_grid(text: str) -> bool:
    parts = text.strip("()[] ").split(",")
    return len(parts) == 2 and all(p.strip().isdigit() for p in parts)


def _is_number(token: str) -> bool:
    return token.lstrip("-").replace(".", "", 1).isdigit()
