"""Typed YAML data files under build/ (pin manifests, plugin states, compat data, release lists).

Also the one YAML parser the project itself uses (libyaml's safe loader where PyYAML was built with
it), and `cached`: parsed data kept on disk, keyed by the files' bytes and the source of the code that
parses them.

Every verdict reads the matrix (models/) and the plugin states (build/tt/) and composes conf/; parsing,
composing and validating cost more than the judging (appliance/config/composition_cache.py keys a
composition). The key covers every byte of every file, its path, the source of each module named as
the parsing code, the interpreter and any other fact the caller names, so a change to any of them
misses at once: a stale entry cannot be read. An entry is a pickle of the project's own frozen dataclasses, read back
by an unpickler that constructs nothing but dataclasses of those modules. A missing, corrupt or
unwritable entry is rebuilt (and rewritten where it can be), never an error. The cache lives in
`$APPLIANCE_CACHE_DIR/data/` (the variable conf/config.yaml's paths.cache_dir reads), else the user
cache dir (`~/.cache/tt-appliance/data/` on Linux).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import logging
import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Collection, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from appliance.errors import ConfigError, Problem

if TYPE_CHECKING:  # pydantic is imported on a cache miss only: a warm verdict does not pay for it
    from pydantic import TypeAdapter

__all__ = ["CACHE_DIR_ENV", "cache_key", "cache_root", "cached", "load_data_file", "parse_yaml"]

T = TypeVar("T")


def parse_yaml(text: str) -> Any:
    """`text` read by the safe loader: libyaml's (about 5x faster) when PyYAML has it, else the pure-Python one."""
    import yaml  # here: a cached verdict reads no YAML (PyYAML's import is about 25 ms)

    return yaml.load(text, Loader=_loader())


@cache
def _loader() -> Any:
    try:
        from yaml import CSafeLoader

        return CSafeLoader
    except ImportError:  # PyYAML built without libyaml
        from yaml import SafeLoader

        return SafeLoader


def load_data_file(path: Path, adapter: TypeAdapter[T], kind: str, what: str) -> T:
    """Parse `path` into `adapter`'s type; `<kind>-missing` or `<kind>-invalid` name the file otherwise.

    A schema mismatch gives one problem per wrong key, each keyed `<file>:<dotted.key>`.
    """
    import yaml
    from pydantic import ValidationError  # local: only a cache miss parses a data file

    try:
        return adapter.validate_python(parse_yaml(path.read_text()))
    except FileNotFoundError:
        raise ConfigError((Problem(code=f"{kind}-missing", key=str(path), message=f"no {what}"),)) from None
    except yaml.YAMLError as err:
        raise ConfigError(
            (Problem(code=f"{kind}-invalid", key=str(path), message=" ".join(str(err).split())),)
        ) from None
    except ValidationError as err:
        raise ConfigError(
            tuple(
                Problem(
                    code=f"{kind}-invalid",
                    key=f"{path}:{'.'.join(map(str, e['loc'])) or '<top>'}",
                    message=" ".join(e["msg"].split()),
                )
                for e in err.errors()
            )
        ) from None


CACHE_DIR_ENV = "APPLIANCE_CACHE_DIR"
log = logging.getLogger(__name__)


def cache_root() -> Path:
    """The appliance's cache directory: $APPLIANCE_CACHE_DIR, else the platform's user cache dir."""
    if env := os.environ.get(CACHE_DIR_ENV):
        return Path(env).expanduser()
    import platformdirs  # only when no directory is given (every test and bench gives one)

    return Path(platformdirs.user_cache_dir("tt-appliance"))


def cached(
    kind: str,
    sources: Sequence[Path],
    code: Sequence[str],
    build: Callable[[], T],
    expected: type[T],
    *,
    facts: Sequence[str] = (),
    per_key: bool = False,
    trusted: Collection[type] = (),
) -> T:
    """`build()`'s result for `sources` as parsed by the modules `code` names: from the cache when its key matches.

    `facts` are the other inputs `build` depends on (overrides, environment values), keyed as given. One
    entry per kind is kept, unless `per_key`: then one per key (a composition per override set).
    `trusted`: the classes other than those dataclasses that reading the entry back may construct.
    A result is stored only when `build` returns; its errors (a malformed file) are raised every time.
    """
    key = cache_key(sources, code, facts)
    if key is None:
        return build()
    path = cache_root() / "data" / (f"{kind}/{key[:32]}.pickle" if per_key else f"{kind}.pickle")
    hit = _read(path, key, code, trusted, expected)
    if hit is not None:
        return hit
    value = build()
    _write(path, key, value)
    return value


def cache_key(sources: Sequence[Path], code: Sequence[str], facts: Sequence[str] = ()) -> str | None:
    """The digest of everything the result depends on; None when a file is unreadable (`build` says why)."""
    digest = hashlib.sha256(sys.version.encode())
    try:
        for name in code:
            source = _module_file(name)
            if source is None:
                return None
            _part(digest, "code", name, source.read_bytes())
        for path in sources:
            _part(digest, "file", str(path), path.read_bytes())
    except OSError:
        return None
    for fact in facts:
        _part(digest, "fact", "", fact.encode())
    return digest.hexdigest()


def _part(digest: hashlib._Hash, kind: str, name: str, data: bytes) -> None:
    """One input, its length first: no two different input lists give the same byte stream."""
    digest.update(f"\0{kind}\0{name}\0{len(data)}\0".encode() + data)


def _module_file(name: str) -> Path | None:
    """The source file of module `name`, found without importing it (nor its package) when not yet imported."""
    if name in sys.modules:
        found = getattr(sys.modules[name], "__file__", None)
        return Path(found) if found else None
    top, *rest = name.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin)
    for part in rest:
        folder = path.parent / part
        path = folder / "__init__.py" if folder.is_dir() else folder.with_suffix(".py")
    return path


class _Unpickler(pickle.Unpickler):
    """Constructs only dataclasses of the allowed modules already imported, and the trusted classes named:
    a foreign pickle cannot run code."""

    def __init__(self, file: Any, allowed: Sequence[str], trusted: Collection[type]) -> None:
        super().__init__(file)
        self.allowed = frozenset(allowed)
        self.trusted = frozenset(trusted)

    def find_class(self, module: str, name: str) -> Any:
        found = super().find_class(module, name) if module in self.allowed and module in sys.modules else None
        if isinstance(found, type) and dataclasses.is_dataclass(found):
            return found
        trusted = next((t for t in self.trusted if (t.__module__, t.__qualname__) == (module, name)), None)
        if trusted is None:
            raise pickle.UnpicklingError(f"{module}.{name} is not a dataclass of {sorted(self.allowed)}")
        return trusted


def _read(path: Path, key: str, code: Sequence[str], trusted: Collection[type], expected: type[T]) -> T | None:
    try:
        with path.open("rb") as file:
            stored = _Unpickler(file, code, trusted).load()
    except FileNotFoundError:
        return None
    except Exception as err:  # any damage to the file (truncated, foreign, garbage) means: rebuild it
        log.debug("ignoring the cache entry %s: %s", path, err)
        return None
    match stored:
        case (str() as stored_key, value) if stored_key == key and isinstance(value, expected):
            return value
    return None


def _write(path: Path, key: str, value: object) -> None:
    """Replace the entry atomically, so a concurrent reader sees the old entry or the new one, whole."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.stem}-", delete=False) as file:
            try:
                pickle.dump((key, value), file, protocol=pickle.HIGHEST_PROTOCOL)
            except (pickle.PicklingError, TypeError):
                os.unlink(file.name)
                raise
        os.replace(file.name, path)
    except (OSError, pickle.PicklingError, TypeError) as err:  # a read-only home: verdicts work uncached
        log.debug("not caching %s: %s", path, err)
