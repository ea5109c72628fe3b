"""Typed YAML data files under build/ (pin manifests, plugin compat data, release lists)."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import TypeAdapter, ValidationError

from appliance.errors import ConfigError, Problem

__all__ = ["load_data_file"]

T = TypeVar("T")


def load_data_file(path: Path, adapter: TypeAdapter[T], kind: str, what: str) -> T:
    """Parse `path` into `adapter`'s type; `<kind>-missing` or `<kind>-invalid` name the file otherwise."""
    try:
        return adapter.validate_python(yaml.safe_load(path.read_text()))
    except FileNotFoundError:
        raise ConfigError((Problem(f"{kind}-missing", str(path), f"no {what}"),)) from None
    except (yaml.YAMLError, ValidationError) as err:
        raise ConfigError((Problem(f"{kind}-invalid", str(path), " ".join(str(err).split())),)) from None
