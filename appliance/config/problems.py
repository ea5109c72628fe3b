"""Hydra's and pydantic's errors as one-line Problems that name the key or file (a composition's refusals)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from appliance.config.secrets import redact
from appliance.errors import Problem
from appliance.resources import conf_dir

__all__ = ["hydra_problem", "problem", "schema_problem"]

_RANGE_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")
_KEY_FIX = "`appliance plan --json` lists every key with its value"
# Hydra's advice for a key its tree lacks: "To append to your config use +<key>=<value>".
_NOT_OVERRIDDEN = re.compile(r"Could not override '(?P<key>[^']+)'\. To append")
# Site and host files reach the root only under `# @package _global_`; without it Hydra nests their keys.
_NESTED = {"site": "a site file", "local": "the host file"}


def hydra_problem(err: Exception, options: Callable[[str], Sequence[str]] = lambda _: ()) -> Problem:
    """Turn Hydra's multi-line exceptions into one line that names the key or file.

    `options(group)`: the group's option names, for the nearest ones to an option that does not exist.
    """
    import yaml  # here, as the suggestions: only a composition that failed needs them

    from appliance.config.suggest import did_you_mean, schema_keys

    text = redact(" ".join(str(err).split()).split(" Config search path:")[0])
    key = getattr(err, "full_key", "") or ""
    missing = re.search(r"Could not (?:find|load) '(?:\w+/)?(?P<group>\w+)/(?P<option>[^']+)'", text)
    if missing:
        group = missing["group"]
        near = did_you_mean(missing["option"], options(group), f"`{group}={{}}`")
        return problem("unknown-option", group, text, f"{near}Run `appliance options` for the choices")
    unknown = _NOT_OVERRIDDEN.search(text)
    if unknown and unknown["key"] not in schema_keys():  # `+key` would only fail in the schema
        return _unknown_key(unknown["key"], "")
    if "Error parsing override" in text or "mismatched input" in text or "no viable alternative" in text:
        return problem("bad-override", "overrides", text, "Write overrides as key=value or group=option")
    if isinstance(err, yaml.YAMLError) or "while parsing" in text or "while scanning" in text:
        return problem("yaml-error", key or "config file", text, "Fix the YAML syntax in that file")
    if "Key" in text and "not in struct" in text or "is not in struct mode" in text:
        return problem("unknown-key", key or "overrides", text, f"Check the spelling: {_KEY_FIX}")
    return problem(
        "bad-config",
        key or "overrides",
        text,
        "Run `appliance options` for the groups and `appliance plan --json` for every key",
    )


def _key_part(part: object) -> str:
    """One step of a dotted key, quoted when a file's stray text made it a key (a newline, a space)."""
    text = str(part)
    return text if text.isprintable() and not any(c.isspace() for c in text) else repr(text)


def _unknown_key(key: str, where: str) -> Problem:
    """A key the schema does not have, set at `where` (a file and line, or ""), with the nearest real keys."""
    from appliance.config.suggest import did_you_mean, schema_keys

    near = did_you_mean(key, schema_keys())
    at = f" (set in {where})" if where else ""
    fix = f"{near or 'Check the spelling: '}{_KEY_FIX}"
    return problem("unknown-key", key, f"`{key}` is not a config key{at}", fix)


def _nested(key: str) -> Problem | None:
    """A site or host file without `# @package _global_`: its sections arrive as `site.serving`, `local`."""
    from appliance.config.suggest import schema_keys

    head, _, rest = key.partition(".")
    if head not in _NESTED or (head == "site" and rest.partition(".")[0] not in schema_keys()):
        return None
    return problem(
        "unknown-key",
        key,
        f"`{key}` is not a config key: {_NESTED[head]}'s keys landed under `{head}`",
        "Start the file with `# @package _global_`, as conf/site/*.yaml do",
    )


def _where(key: str, provenance: Mapping[str, str]) -> str:
    """`file:line` of the file that set `key` (compose's provenance), "" for the command line."""
    source = provenance.get(key)
    if source is None or source == "command line":
        return ""
    from appliance.config.suggest import yaml_line

    path = Path(source) if Path(source).is_absolute() else conf_dir().parent / source
    line = yaml_line(path, key)
    return source if line is None else f"{source}:{line}"


def schema_problem(error: Any, provenance: Mapping[str, str]) -> Problem:
    """One pydantic error as a Problem; `provenance` (dotted key -> file) locates a key the schema lacks."""
    key = ".".join(_key_part(p) for p in error["loc"])
    if error["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
        return _nested(key) or _unknown_key(key, _where(key, provenance))
    if error["type"] == "missing":
        return problem("missing-key", key, f"`{key}` has no value", f"Set {key}=<value>")
    key = key.removesuffix(".[key]")
    if error["type"] == "string_pattern_mismatch":
        from appliance.config.schema import PATTERNS

        what, how = PATTERNS[error["ctx"]["pattern"]]
        return problem("bad-value", key, f"{error.get('input')!r} is not {what}", f"Set {key} to {how}")
    if error["type"] == "string_too_short":
        return problem("bad-value", key, "is empty", f"Give {key} a value or leave it out")
    if error["type"] in _RANGE_ERRORS:
        bound = error["msg"].removeprefix("Input should be ")
        return problem("bad-value", key, f"{error.get('input')!r} is out of range", f"Set {key} {bound}")
    return problem("bad-type", key, f"{error['msg']} (got {error.get('input')!r})", f"Set {key} to a valid value")


def problem(code: str, key: str, message: str, fix: str) -> Problem:
    return Problem(code=code, key=key, message=message, fix=fix)
