"""Typed YAML data files under build/ (pin manifests, plugin states, compat data, release lists).

Also the one YAML parser the project itself uses: libyaml's safe loader where PyYAML was built with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import TypeAdapter, ValidationError

from appliance.errors import ConfigError, Problem

__all__ = ["load_data_file", "parse_yaml"]

T = TypeVar("T")

try:
    from yaml import CSafeLoader as _Loader
except ImportError:  # PyYAML built without libyaml
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]


def parse_yaml(text: str) -> Any:
    """`text` read by the safe loader: libyaml's (about 5x faster) when PyYAML has it, else the pure-Python one."""
    return yaml.load(text, Loader=_Loader)


def load_data_file(path: Path, adapter: TypeAdapter[T], kind: str, what: str) -> T:
    """Parse `path` into `adapter`'s type; `<kind>-missing` or `<kind>-invalid` name the file otherwise.

    A schema mismatch gives one problem per wrong key, each keyed `<file>:<dotted.key>`.
    """
    try:
        return adapter.validate_python(parse_yaml(path.read_text()))
    except FileNotFoundError:
        raise ConfigError((Problem(f"{kind}-missing", str(path), f"no {what}"),)) from None
    except yaml.YAMLError as err:
        raise ConfigError((Problem(f"{kind}-invalid", str(path), " ".join(str(err).split())),)) from None
    except ValidationError as err:
        raise ConfigError(tuple(
            Problem(f"{kind}-invalid", f"{path}:{'.'.join(map(str, e['loc'])) or '<top>'}", " ".join(e["msg"].split()))
            for e in err.errors()
        )) from None  # fmt: skip
