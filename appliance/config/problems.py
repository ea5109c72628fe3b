"""Hydra's and pydantic's errors as one-line Problems that name the key or file (a composition's refusals)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from appliance.config.secrets import redact
from appliance.errors import Problem

__all__ = ["hydra_problem", "problem", "schema_problem"]

_RANGE_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


def hydra_problem(err: Exception) -> Problem:
    """Turn Hydra's multi-line exceptions into one line that names the key or file."""
    import yaml  # here: only a composition that failed needs it

    text = redact(" ".join(str(err).split()).split(" Config search path:")[0])
    key = getattr(err, "full_key", "") or ""
    missing = re.search(r"Could not (?:find|load) '(?:\w+/)?(?P<group>\w+)/", text)
    if missing:
        return problem("unknown-option", missing["group"], text, "Run `appliance options` for the choices")
    if "Error parsing override" in text or "mismatched input" in text or "no viable alternative" in text:
        return problem("bad-override", "overrides", text, "Write overrides as key=value or group=option")
    if isinstance(err, yaml.YAMLError) or "while parsing" in text or "while scanning" in text:
        return problem("yaml-error", key or "config file", text, "Fix the YAML syntax in that file")
    if "Key" in text and "not in struct" in text or "is not in struct mode" in text:
        return problem(
            "unknown-key",
            key or "overrides",
            text,
            "Check the spelling: `appliance plan --json` lists every key with its value",
        )
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


def schema_problem(error: Any, choices: Mapping[str, str]) -> Problem:
    key = ".".join(_key_part(p) for p in error["loc"])
    if error["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
        return problem(
            "unknown-key",
            key,
            f"`{key}` is not a config key",
            "Check the spelling: `appliance plan --json` lists every key with its value",
        )
    if error["type"] == "missing":
        return problem("missing-key", key, f"`{key}` has no value", f"Set {key}=<value>")
    key = key.removesuffix(".[key]")
    if error["type"] == "string_pattern_mismatch":
        return problem("bad-value", key, f"{error.get('input')!r} is not an environment variable name",
                        f"Set {key} to letters, digits and _ (not starting with a digit)")  # fmt: skip
    if error["type"] == "string_too_short":
        return problem("bad-value", key, "is empty", f"Give {key} a value or leave it out")
    if error["type"] in _RANGE_ERRORS:
        bound = error["msg"].removeprefix("Input should be ")
        return problem("bad-value", key, f"{error.get('input')!r} is out of range", f"Set {key} {bound}")
    return problem("bad-type", key, f"{error['msg']} (got {error.get('input')!r})", f"Set {key} to a valid value")


def problem(code: str, key: str, message: str, fix: str) -> Problem:
    return Problem(code=code, key=key, message=message, fix=fix)
