"""Which generation an appliance serves, and the record of its last upgrade, kept on disk.

The journal holds the current generation, the one
before it (what a rollback returns to) and the last upgrade with every step and gate.

The current generation changes in one atomic write, at the upgrade's commit. So an appliance killed at any
step comes back on the old generation or the new one, never between: `resume` finds an upgrade that did not
end, records it as interrupted at its step, and serves the current (old) generation.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from pydantic import ConfigDict, TypeAdapter, ValidationError

from appliance.control.upgrade_documents import GenerationDocument, UpgradeDocument
from appliance.errors import ConfigError, Problem

__all__ = [
    "Journal",
    "journal_path",
    "read_journal",
    "resume",
    "write_journal",
]


@dataclass(frozen=True, slots=True)
class Journal:
    __pydantic_config__ = ConfigDict(extra="forbid")

    base: tuple[str, ...]
    """`serve`'s own command-line overrides: generations are built on them."""
    site_dir: str | None
    """`serve --site-dir`, which the overrides are composed with."""
    current: GenerationDocument
    previous: GenerationDocument | None = None
    last: UpgradeDocument | None = None


_ADAPTER: TypeAdapter[Journal] = TypeAdapter(Journal)


def journal_path(state_dir: str, control_port: int) -> Path:
    return Path(state_dir) / f"generation-{control_port}.json"


def read_journal(path: Path) -> Journal | None:
    """The journal, or None where there is none; a damaged one is a ConfigError naming it."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise _damaged(path, f"cannot read it: {error.strerror}") from None
    try:
        return _ADAPTER.validate_json(text)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the file"
        raise _damaged(path, f"{where}: {first['msg'].lower()}") from None


def write_journal(path: Path, journal: Journal) -> None:
    """Replace the journal atomically: a reader, or an appliance killed mid-write, sees the old or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}-", delete=False) as file:
        json.dump(_ADAPTER.dump_python(journal, mode="json"), file, indent=1, sort_keys=True)
        file.flush()
        os.fsync(file.fileno())
    os.replace(file.name, path)


def resume(found: Journal | None, base: tuple[str, ...], site_dir: str | None, first: GenerationDocument) -> Journal:
    """The journal `serve` starts from: `first` where there is none or `serve`'s own overrides changed since
    (the operator's command line wins over generations built on an older one), else the recorded one with an
    unfinished upgrade marked interrupted at its step."""
    if found is None or (found.base, found.site_dir) != (base, site_dir):
        return Journal(base, site_dir, first)
    last = found.last
    if last is None or last.outcome != "running":
        return found
    reason = f"interrupted at step {last.step or 'start'}: the appliance stopped; serving generation {found.current.id}"
    return replace(found, last=replace(last, outcome="interrupted", reason=reason))


def _damaged(path: Path, message: str) -> ConfigError:
    fix = "Move it aside: serve then starts from its command line's generation"
    return ConfigError((Problem(code="generation-journal", key=str(path), message=message, fix=fix),))
