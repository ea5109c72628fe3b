"""Compose conf/ with Hydra's compose API and parse the result into an ApplianceConfig.

This module and config/value_overrides.py are the only ones that touch Hydra or OmegaConf. Everything
they return is plain, frozen data, so the later stages never see a DictConfig and mistakes surface
here together, each with its dotted key. A composition that passed is cached on disk by every input
that decides it (config/composition_cache.py): a warm call imports neither Hydra nor the config
schema's adapter. Below that, the merge of the group selections alone is cached too (unresolved), so
an override set the cache has not seen but whose group choices it has runs only Hydra's override step.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

from appliance.config.composition_cache import CODE, cached_composition
from appliance.config.constraints import check_constraints
from appliance.config.problems import hydra_problem, problem, schema_problem
from appliance.config.schema import ApplianceConfig, ComposedConfig, MeshConfig
from appliance.config.secrets import find_secrets
from appliance.config.value_overrides import apply_value_overrides, split_overrides, tree_classes
from appliance.data_files import cached, parse_yaml
from appliance.errors import ConfigError
from appliance.resources import conf_dir

if TYPE_CHECKING:
    from omegaconf import DictConfig
    from pydantic_core import SchemaValidator

__all__ = [
    "CONF_DIR",
    "GROUPS",
    "compose_config",
    "compose_tree",
    "composition_inputs",
    "defaults_choices",
    "group_options",
    "group_selections",
    "mesh_catalog",
]

CONF_DIR = conf_dir()
GROUPS = ("model", "mesh", "precision", "engine", "workload", "gateway", "site")
COMMAND_LINE = "command line"
_GROUP_ALIAS = re.compile(rf"^\+(?P<group>{'|'.join(GROUPS)})=")
_GROUP_CHOICE = re.compile(rf"^(?P<group>{'|'.join(GROUPS)})=(?P<value>.*)$")
_OPTION_NAME = re.compile(r"[A-Za-z0-9_.-]+")
# Open-ended maps: setting a new key there is normal, not a typo, so no `+` is needed.
_OPEN_MAP = re.compile(
    r"^\+{0,2}(?P<key>(?:tt|engine\.env|engine\.secret_env|gateway\.models|gateway\.clients)\.[^=]+=)"
)


@dataclass(frozen=True, slots=True)
class _Merged:
    """Hydra's merge of the group selections, the options it chose and the layer that set each key.

    The tree is kept as OmegaConf's own node tree, unresolved: reading it back is about 1 ms, building it
    from plain data about 13 ms of every override set the cache has not seen.
    """

    tree: DictConfig
    choices: dict[str, str]
    origin: dict[str, str]


@dataclass(frozen=True, slots=True)
class _Composition:
    """What the cache keeps of a ComposedConfig: plain dicts (a mapping proxy does not pickle), no overrides."""

    config: ApplianceConfig
    choices: dict[str, str]
    provenance: dict[str, str]
    config_hash: str


def compose_config(
    overrides: Sequence[str] = (),
    *,
    site_dir: Path | None = None,
    host_file: Path | None = None,
) -> ComposedConfig:
    """Compose conf/ with `overrides` and parse it; raise ConfigError listing every problem."""
    normalized, site_dir, host_file = composition_inputs(overrides, site_dir, host_file)
    kept = cached_composition(
        "compose", normalized, site_dir, host_file, lambda: _composition(normalized, site_dir, host_file), _Composition
    )
    return ComposedConfig(
        config=kept.config,
        choices=MappingProxyType(dict(kept.choices)),
        provenance=MappingProxyType(dict(kept.provenance)),
        overrides=tuple(overrides),
        config_hash=kept.config_hash,
        site_dir=str(site_dir.resolve()) if site_dir else None,
    )


def _composition(normalized: tuple[str, ...], site_dir: Path | None, host_file: Path | None) -> _Composition:
    """Compose with Hydra, scan for secrets, parse into the schema and check the constraints."""
    from pydantic_core import ValidationError  # local: a cached composition never parses

    with _extra_root(site_dir, host_file) as extra_root:
        raw, choices, provenance = compose_tree(normalized, site_dir, host_file, extra_root)
    if secrets := find_secrets(raw, provenance):
        raise ConfigError(tuple(secrets))  # before parsing: a type error would echo the value
    try:
        config = _validator(ApplianceConfig).validate_python(raw)
    except ValidationError as err:
        raise ConfigError(tuple(schema_problem(e, provenance) for e in err.errors())) from None
    if problems := check_constraints(config):
        raise ConfigError(tuple(problems))
    digest = hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()
    return _Composition(config=config, choices=dict(choices), provenance=provenance, config_hash=digest[:12])


@cache
def _validator(shape: type[Any]) -> SchemaValidator:
    """`shape`'s compiled validator, kept in the data cache: pydantic-core pickles it as its core schema.

    Building it costs more than validating: pydantic's import, its plugin lookup over every installed
    package and its schema generation (about 0.1 s for the whole config), against 2 ms to read it back.
    The key is the schema's and pydantic's source. Where a pydantic plugin wraps the validator, the
    wrapper is never read back (the read wants a bare SchemaValidator): it is rebuilt each time.
    """
    from pydantic_core import SchemaValidator

    def build() -> SchemaValidator:
        from pydantic import TypeAdapter

        return cast("SchemaValidator", TypeAdapter(shape).validator)  # a plugin's wrapper: see above

    kind = f"validator-{shape.__name__}"
    return cached(kind, [], CODE, build, SchemaValidator, trusted=(SchemaValidator, dict))


def composition_inputs(
    overrides: Sequence[str], site_dir: Path | None, host_file: Path | None
) -> tuple[tuple[str, ...], Path | None, Path | None]:
    """The overrides in Hydra's spelling and the site dir and host file in force; ConfigError if unusable."""
    site_dir = site_dir or _env_path("APPLIANCE_SITE_DIR")
    host_file = host_file or _env_path("APPLIANCE_HOST_FILE")
    if site_dir is not None and not site_dir.is_dir():
        fix = "Create it or point APPLIANCE_SITE_DIR/--site-dir at the fleet's site files"
        raise ConfigError((problem("site-dir-missing", "--site-dir", f"{site_dir} is not a directory", fix),))
    if host_file is not None and not host_file.is_file():
        raise ConfigError(
            (
                problem(
                    "host-file-missing",
                    "APPLIANCE_HOST_FILE",
                    f"{host_file} does not exist",
                    "Unset APPLIANCE_HOST_FILE or create the file",
                ),
            )
        )
    normalized = tuple(_OPEN_MAP.sub(r"++\g<key>", _GROUP_ALIAS.sub(r"\g<group>=", o)) for o in overrides)
    bad_choices = [
        problem("bad-override", m["group"], f"{o!r}: a group takes one option name", f"Use {m['group']}=<option>")
        for o in normalized
        if (m := _GROUP_CHOICE.match(o)) and not _OPTION_NAME.fullmatch(m["value"])
    ]
    if bad_choices:
        raise ConfigError(tuple(bad_choices))
    return normalized, site_dir, host_file


def defaults_choices(normalized: Sequence[str], site_dir: Path | None, host_file: Path | None) -> dict[str, str]:
    """The option of every config group under `normalized`, from Hydra's defaults list alone (nothing merged)."""
    # Hydra is imported here, not at the top: a cached verdict never loads it (about 0.3 s).
    import yaml
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf.errors import OmegaConfBaseException

    with _extra_root(site_dir, host_file) as extra_root:
        search = [f"hydra.searchpath=[file://{extra_root}]"] if extra_root else []
        try:
            with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
                loader = GlobalHydra.instance().config_loader()
                defaults = loader.compute_defaults_list("config", [*search, *normalized], RunMode.RUN)
        except (HydraException, OmegaConfBaseException, yaml.YAMLError, ValueError) as err:
            raise ConfigError((hydra_problem(err, lambda group: group_options(group, site_dir)),)) from None
    known = defaults.overrides.known_choices.items()
    return {k: str(v) for k, v in known if v is not None and not k.startswith("hydra/")}


def group_selections(overrides: Sequence[str]) -> tuple[str, ...]:
    """The overrides that select config group options (`mesh=t3k`, `+model=llama`)."""
    return tuple(o for o in overrides if _GROUP_CHOICE.match(_GROUP_ALIAS.sub(r"\g<group>=", o)))


def group_options(group: str, site_dir: Path | None = None) -> tuple[str, ...]:
    """Names of the options a config group offers (site options include --site-dir)."""
    dirs = [CONF_DIR / group] + ([site_dir] if group == "site" and site_dir else [])
    return tuple(sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.yaml")}))


def mesh_catalog() -> dict[str, MeshConfig]:
    """Every concrete mesh option, keyed by option name (for matching discovered boards), cached by content.

    mesh=auto asks for it on every call on a host with boards; the boards are looked at afresh each time.
    """
    paths = [CONF_DIR / "mesh" / f"{name}.yaml" for name in group_options("mesh")]
    return cached("mesh-catalog", paths, CODE, lambda: _mesh_catalog(paths), dict)


def _mesh_catalog(paths: Sequence[Path]) -> dict[str, MeshConfig]:
    validator = _validator(MeshConfig)
    meshes: dict[str, MeshConfig] = {path.stem: validator.validate_python(_load_yaml(path)) for path in paths}
    return {name: mesh for name, mesh in meshes.items() if mesh.arch != "auto"}


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value).expanduser() if value else None


@contextmanager
def _extra_root(site_dir: Path | None, host_file: Path | None) -> Iterator[Path | None]:
    """A throwaway Hydra search-path root linking the external site dir and host-local file.

    Hydra finds group options only as `<root>/<group>/<name>.yaml`; links let a fleet keep its
    site files in any directory without copying them.
    """
    if site_dir is None and host_file is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="appliance-conf-") as tmp:
        root = Path(tmp)
        if site_dir is not None:
            (root / "site").symlink_to(site_dir.resolve(), target_is_directory=True)
        if host_file is not None:
            (root / "local").mkdir()
            (root / "local" / "host.yaml").symlink_to(host_file.resolve())
        yield root


def compose_tree(
    normalized: tuple[str, ...], site_dir: Path | None, host_file: Path | None, extra_root: Path | None
) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """Hydra's composition of `normalized`, resolved, the group choices it made and each key's provenance."""
    # Hydra and OmegaConf are imported in these steps, not at the top: a cached composition never loads them.
    import yaml
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        first, values = split_overrides(normalized, _search_path_groups(extra_root))
        merged = cached_composition(
            "merged", first, site_dir, host_file, lambda: _merge(first, extra_root), _Merged, trusted=tree_classes()
        )
        return apply_value_overrides(merged.tree, values), merged.choices, _provenance(merged.origin, normalized)
    except (HydraException, OmegaConfBaseException, yaml.YAMLError, ValueError) as err:
        # Hydra raises a bare ValueError for some malformed group overrides (e.g. `mesh=0`).
        raise ConfigError((hydra_problem(err, lambda group: group_options(group, site_dir)),)) from None


def _merge(overrides: tuple[str, ...], extra_root: Path | None) -> _Merged:
    """Hydra's composition of `overrides`, without its own node and unresolved, and its group choices."""
    from hydra import compose, initialize_config_dir
    from omegaconf import DictConfig, OmegaConf, open_dict

    search = [f"hydra.searchpath=[file://{extra_root}]"] if extra_root else []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[*search, *overrides], return_hydra_config=True)
    choices = {k: str(v) for k, v in cfg.hydra.runtime.choices.items() if not k.startswith("hydra/")}
    with open_dict(cfg):
        del cfg["hydra"]
    # A tree of the plain data alone: none of the flags and node types Hydra's composition left on `cfg`.
    tree = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    assert isinstance(tree, DictConfig)  # a composed root is always a mapping
    return _Merged(tree=tree, choices=choices, origin=_file_origin(choices, extra_root))


def _search_path_groups(extra_root: Path | None) -> set[str]:
    """The config groups of the search path's folders (Hydra's own are all under `hydra`)."""
    return {p.name for root in (CONF_DIR, extra_root) if root is not None for p in root.iterdir() if p.is_dir()}


def _provenance(origin: Mapping[str, str], overrides: tuple[str, ...]) -> dict[str, str]:
    """Dotted key -> last layer that set it: the files' `origin`, then the command line's `overrides`."""
    provenance = dict(origin)
    for override in overrides:
        key, _, _ = override.lstrip("+~").partition("=")
        if key and key not in GROUPS and not key.startswith("hydra."):
            provenance[key] = COMMAND_LINE
            for known in [k for k in provenance if k.startswith(key + ".")]:
                provenance[known] = COMMAND_LINE
    return dict(sorted(provenance.items()))


def _file_origin(choices: Mapping[str, str], extra_root: Path | None) -> dict[str, str]:
    """Dotted key -> the file of the last layer that set it, in the defaults-list order of conf/config.yaml."""
    roots = [CONF_DIR] + ([extra_root] if extra_root else [])
    origin: dict[str, str] = {}
    primary = _load_yaml(CONF_DIR / "config.yaml")
    primary.pop("defaults", None)
    _record(origin, primary, "", "conf/config.yaml")
    for group in (*GROUPS, "local"):
        option = choices.get(group)
        path = next((r / group / f"{option}.yaml" for r in roots if (r / group / f"{option}.yaml").is_file()), None)
        if option is None or path is None:
            continue
        data = _load_yaml(path)
        data.pop("defaults", None)
        prefix = "" if group in ("site", "local") else f"{group}."
        _record(origin, data, prefix, _display(path.resolve()))
    return origin


def _load_yaml(path: Path) -> dict[str, Any]:
    data = parse_yaml(path.read_text()) or {}
    return data if isinstance(data, dict) else {}


def _record(origin: dict[str, str], data: Mapping[str, Any], prefix: str, source: str) -> None:
    for key, value in data.items():
        if isinstance(value, Mapping) and value:
            _record(origin, value, f"{prefix}{key}.", source)
        else:
            origin[f"{prefix}{key}"] = source


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(CONF_DIR.parent))
    except ValueError:
        return str(path)
