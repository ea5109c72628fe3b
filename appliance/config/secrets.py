"""Credentials by value in a composed config: found before anything is parsed, planned or printed.

Secrets travel by variable name only (`*_env` keys, `engine.secret_env`). A value that looks like
a credential, under a name that says it is one, or after a flag that takes one, is refused with the
key and the file that set it, and never repeated in the message.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from appliance.errors import Problem

__all__ = ["find_secrets", "redact"]

# Shapes of well-known tokens: Hugging Face, OpenAI-style, GitHub, AWS access keys, Slack, bearer headers.
_TOKEN = re.compile(
    r"\bhf_[A-Za-z0-9]{20,}|\bsk-[A-Za-z0-9_-]{16,}|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_\w{20,}"
    r"|\bAKIA[0-9A-Z]{16}\b|\bxox[abpr]-[A-Za-z0-9-]{10,}|\bBearer\s+\S{8,}"
)
# Names that say their value is a credential; `*_env` keys hold a variable's name, not its value.
_SECRET_NAME = re.compile(r"(?i)(?:^|[_.-])(?:api[_-]?key|key|token|secret|password|passwd|credentials?)$|password")
_SECRET_FLAGS = ("--api-key", "--hf-token", "--token", "--password", "--secret")
_REFERENCE = re.compile(r"^\$\{?[A-Za-z_][A-Za-z0-9_]*\}?$")


def find_secrets(raw: Mapping[str, Any], provenance: Mapping[str, str]) -> list[Problem]:
    """One problem per key that holds a credential by value (the value itself is never shown)."""
    return [_problem(key, how, provenance) for key, how in _scan(raw, "")]


def redact(text: str) -> str:
    """`text` with every token-shaped substring masked: for messages that quote what was given."""
    return _TOKEN.sub("<redacted>", text)


def _scan(value: Any, key: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, Mapping):
        for name, item in value.items():
            yield from _scan(item, f"{key}.{name}" if key else str(name))
    elif isinstance(value, Sequence) and not isinstance(value, str):
        yield from _scan_args([str(v) for v in value], key)
    elif isinstance(value, str) and value and not _REFERENCE.match(value):
        name = key.rsplit(".", 1)[-1]
        if _TOKEN.search(value):
            yield key, "looks like a token"
        elif _SECRET_NAME.search(name) and not _holds_a_name(key):
            yield key, f"{name!r} names a credential"


def _holds_a_name(key: str) -> bool:
    """`*_env` keys and engine.secret_env's values are variable names by design."""
    return key.endswith("_env") or key.startswith("engine.secret_env.")


def _scan_args(args: list[str], key: str) -> Iterator[tuple[str, str]]:
    skip = -1
    for i, arg in enumerate(args):
        flag, eq, inline = arg.partition("=")
        given = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
        if i == skip:
            continue
        if flag in _SECRET_FLAGS and given and not _REFERENCE.match(given):
            skip = i + 1 if not eq else skip  # the flag's value is reported with the flag
            yield f"{key}[{i}]", f"{flag} takes a credential"
        elif _TOKEN.search(arg):
            yield f"{key}[{i}]", "looks like a token"


def _problem(key: str, how: str, provenance: Mapping[str, str]) -> Problem:
    where = provenance.get(key.split("[", 1)[0], "the config")
    return Problem(
        code="secret-by-value",
        key=key,
        message=f"{key} holds a credential by value ({how}; set in {where}); it would reach plans, units and logs",
        fix=_fix(key),
    )


def _fix(key: str) -> str:
    if key.startswith("engine.extra_args"):
        return (
            "Drop the flag: serving.api_key_env=<VAR> passes the API key by name, site.hf_token_env=<VAR> the hub token"
        )
    if key.startswith("engine.env."):
        name = key.removeprefix("engine.env.")
        return f"Pass it by name: engine.secret_env.{name}=<VAR>, with the value in the environment variable VAR"
    return "Keep it in an environment variable named by site.hf_token_env, serving.api_key_env or engine.secret_env"
