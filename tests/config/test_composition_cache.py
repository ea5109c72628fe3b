"""The on-disk composition cache: a hit is exactly a miss, every input misses when it changes, never stale.

Every test composes with the real Hydra into its own empty APPLIANCE_CACHE_DIR (or an unusable one).
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from appliance.config.choices import group_choices
from appliance.config.compose import compose_config, mesh_catalog
from appliance.config.composition_cache import composition_key
from appliance.data_files import cache_key
from appliance.errors import ConfigError
from appliance.resources import conf_dir
from testkit.helpers import Cli
from tests.compat.test_data_cache import Payload
from tests.config.test_secret_values import TOKENS

VERDICT = ("+model=llama", "mesh=n150", "serving.max_context=131072")
RACK = "# @package _global_\ndefaults:\n  - override /mesh: t3k\nsite:\n  name: rack\nserving:\n  max_context: {}\n"


@pytest.fixture
def entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder of this test's cached compositions (its cache dir starts empty)."""
    monkeypatch.setenv("APPLIANCE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "data" / "compose"


def kept(entries: Path) -> set[Path]:
    return set(entries.glob("*.pickle")) if entries.is_dir() else set()


def rack(tmp_path: Path, context: int) -> Path:
    """A site dir whose `rack` site overrides the mesh (so its choices come from Hydra's defaults list)."""
    (tmp_path / "sites").mkdir(exist_ok=True)
    (tmp_path / "sites" / "rack.yaml").write_text(RACK.format(context))
    return tmp_path / "sites"


def test_a_hit_returns_what_a_miss_returns(entries: Path, tmp_path: Path) -> None:
    host = tmp_path / "host.yaml"
    host.write_text("# @package _global_\nserving:\n  max_concurrency: 16\n")
    for overrides, site_dir in (((*VERDICT[:2],), None), (("site=rack", "+model=llama"), rack(tmp_path, 8192))):
        miss = compose_config(overrides, site_dir=site_dir, host_file=host)
        written = kept(entries)
        hit = compose_config(overrides, site_dir=site_dir, host_file=host)
        assert hit == miss and hit is not miss and kept(entries) == written != set()
    assert hit.provenance["serving.max_concurrency"] == str(host.resolve())


def test_group_choices_from_hydras_defaults_list_are_cached_too(entries: Path, tmp_path: Path) -> None:
    site_dir = rack(tmp_path, 8192)
    first = group_choices(["site=rack"], site_dir=site_dir)
    assert len(kept(entries.with_name("choices"))) == 1
    assert group_choices(["site=rack"], site_dir=site_dir) == first and first["mesh"] == "t3k"


@pytest.mark.parametrize("command", [("validate",), ("validate", "--json"), ("plan",), ("plan", "--json")])
def test_the_cli_says_the_same_from_a_cold_and_a_warm_cache(entries: Path, cli: Cli, command: tuple[str, ...]) -> None:
    overrides = VERDICT if command[0] == "validate" else VERDICT[:2]
    cold = cli(*command, *overrides)
    assert kept(entries)
    warm = cli(*command, *overrides)
    assert (cold.returncode, cold.stdout, cold.stderr) == (warm.returncode, warm.stdout, warm.stderr)
    assert cold.returncode == (2 if command[0] == "validate" else 0)


def test_the_mesh_catalog_mesh_auto_matches_boards_against_is_cached(entries: Path) -> None:
    first = mesh_catalog()
    assert (entries.parent / "mesh-catalog.pickle").is_file()
    assert mesh_catalog() == first and first["t3k"].boards == 4 and "auto" not in first


def test_a_changed_override_misses(entries: Path) -> None:
    assert compose_config(["mesh=cpu", "serving.port=8001"]).config.serving.port == 8001
    assert compose_config(["mesh=cpu", "serving.port=8002"]).config.serving.port == 8002
    assert len(kept(entries)) == 2


def test_a_changed_environment_variable_that_conf_reads_misses(entries: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for log_dir in ("/srv/logs-a", "/srv/logs-b"):
        monkeypatch.setenv("APPLIANCE_LOG_DIR", log_dir)
        assert compose_config(["mesh=cpu"]).config.paths.log_dir == log_dir
    monkeypatch.delenv("APPLIANCE_LOG_DIR")
    assert compose_config(["mesh=cpu"]).config.paths.log_dir.endswith("/logs")
    assert len(kept(entries)) == 3


def test_a_changed_site_file_misses(entries: Path, tmp_path: Path) -> None:
    for context in (2048, 4096):
        site_dir = rack(tmp_path, context)
        assert compose_config(["site=rack", "+model=llama"], site_dir=site_dir).config.serving.max_context == context
        assert group_choices(["site=rack"], site_dir=site_dir)["mesh"] == "t3k"
    assert len(kept(entries)) == 2


def test_a_changed_host_file_misses(entries: Path, tmp_path: Path) -> None:
    host = tmp_path / "host.yaml"
    for port in (9001, 9002):
        host.write_text(f"# @package _global_\nserving:\n  port: {port}\n")
        assert compose_config(["mesh=cpu"], host_file=host).config.serving.port == port
    assert len(kept(entries)) == 2


def test_the_key_changes_with_a_conf_file_s_bytes(tmp_path: Path) -> None:
    conf = Path(shutil.copytree(conf_dir(), tmp_path / "conf"))
    before = composition_key(VERDICT, None, None, conf)
    assert before is not None and composition_key(VERDICT, None, None, conf) == before
    mesh = conf / "mesh" / "n150.yaml"
    mesh.write_text(mesh.read_text() + "\n# an edit\n")
    assert composition_key(VERDICT, None, None, conf) not in (None, before)


def test_the_key_changes_with_the_source_of_the_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module written here stands for the composing code: editing the package's own would break the session."""
    module = tmp_path / "composing_code_stand_in.py"
    module.write_text("RULE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = cache_key([], ["composing_code_stand_in"])
    module.write_text("RULE = 2\n")
    assert cache_key([], ["composing_code_stand_in"]) not in (None, before)


def test_a_computed_environment_name_a_clock_or_a_search_path_is_never_cached(entries: Path, tmp_path: Path) -> None:
    host = tmp_path / "host.yaml"
    host.write_text("# @package _global_\nsite:\n  description: ${oc.env:${site.name}_NOTE,none}\n")
    assert compose_config(["mesh=cpu"], host_file=host).config.site.description == "none"
    assert compose_config(["mesh=cpu", "site.description=${now:%Y}"]).config.site.description.isdigit()
    extra = tmp_path / "extra" / "site"
    extra.mkdir(parents=True)
    (extra / "far.yaml").write_text("# @package _global_\nsite:\n  name: far\n")
    search = f"hydra.searchpath=[file://{extra.parent}]"
    assert compose_config(["mesh=cpu", "site=far", search]).config.site.name == "far"
    assert not kept(entries)


def test_nothing_is_cached_where_a_hydra_plugin_package_is_installed(
    entries: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty `hydra_plugins` namespace stands for an installed plugin (one may add search paths)."""
    (tmp_path / "plugins" / "hydra_plugins").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    imported = "hydra_plugins" in sys.modules
    try:
        assert compose_config(["mesh=cpu"]) == compose_config(["mesh=cpu"])
    finally:
        if not imported:  # Hydra's plugin scan imports the namespace: later tests must not find it
            sys.modules.pop("hydra_plugins", None)
    assert not kept(entries)


def test_a_corrupt_entry_gives_the_right_config_and_is_rewritten(entries: Path) -> None:
    expected = compose_config(VERDICT[:2])
    (entry,) = kept(entries)
    entry.write_bytes(b"\x80\x05not a pickle at all")
    assert compose_config(VERDICT[:2]) == expected
    key, value = pickle.loads(entry.read_bytes())
    assert isinstance(key, str) and value.config == expected.config


def test_an_unwritable_cache_dir_gives_the_right_config(entries: Path) -> None:
    expected = compose_config(VERDICT[:2])
    shutil.rmtree(entries.parent)
    entries.parent.write_text("a file where the cache's folder should be\n")  # the same APPLIANCE_CACHE_DIR
    assert compose_config(VERDICT[:2]) == compose_config(VERDICT[:2]) == expected


@pytest.mark.parametrize("overrides", [["mesh=nope"], ["mesh=cpu", "serving.port=0"], ["mesh=cpu", "serving.bogus=1"]])
def test_a_refused_config_is_refused_every_time_and_leaves_no_entry(entries: Path, overrides: list[str]) -> None:
    refusals = []
    for _ in range(2):
        with pytest.raises(ConfigError) as caught:
            compose_config(overrides)
        refusals.append(caught.value.problems)
    assert refusals[0] == refusals[1] and not kept(entries)


def test_a_secret_planted_in_a_cached_site_file_is_refused(entries: Path, tmp_path: Path) -> None:
    site = tmp_path / "lab.yaml"
    site.write_text("# @package _global_\nsite:\n  name: lab\n")
    compose_config(["site=lab", "mesh=cpu"], site_dir=tmp_path)
    assert len(kept(entries)) == 1
    site.write_text(site.read_text() + f"engine:\n  env:\n    HF_TOKEN: {TOKENS[0]}\n")
    for _ in range(2):
        with pytest.raises(ConfigError) as caught:
            compose_config(["site=lab", "mesh=cpu"], site_dir=tmp_path)
        assert [p.code for p in caught.value.problems] == ["secret-by-value"]
    assert len(kept(entries)) == 1


def test_a_warm_verdict_imports_neither_hydra_nor_pydantic_nor_yaml(tmp_path: Path) -> None:
    """In a fresh interpreter, as an operator's second `appliance validate` (site choices from Hydra's list)."""
    site_dir = rack(tmp_path, 8192)
    probe = (
        "import sys\nfrom appliance.cli.main import main\n"
        f"code = main(['validate', 'site=rack', '+model=llama', '--site-dir', {str(site_dir)!r}])\n"
        "print(code, sorted({m.split('.')[0] for m in sys.modules} & {'hydra', 'omegaconf', 'pydantic', 'yaml'}))\n"
    )
    env = os.environ | {"APPLIANCE_CACHE_DIR": str(tmp_path / "cache")}
    runs = [
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False)
        for _ in range(2)
    ]
    assert runs[0].stdout.splitlines()[-1] == "0 ['hydra', 'omegaconf', 'pydantic', 'yaml']"
    assert runs[1].stdout.splitlines()[-1] == "0 []"
    assert runs[0].stderr == runs[1].stderr


def test_an_unseen_value_override_reuses_its_group_selections_merge_and_the_schema_s_validator(tmp_path: Path) -> None:
    """An operator's next edit, in fresh interpreters: Hydra's override step on the cached merge, no pydantic import.

    Its verdict is the one an empty cache gives (tests/config/test_value_overrides.py checks the trees themselves).
    """
    probe = (
        "import sys\nfrom appliance.cli.main import main\n"
        "code = main(['plan', '--json', '+model=llama', 'mesh=n150', f'serving.port={sys.argv[1]}'])\n"
        "print(code, 'pydantic' in sys.modules)\n"
    )

    def plan(port: int) -> subprocess.CompletedProcess[str]:
        env = os.environ | {"APPLIANCE_CACHE_DIR": str(tmp_path / "cache")}  # the plan shows paths under it
        return subprocess.run(
            [sys.executable, "-c", probe, str(port)], capture_output=True, text=True, env=env, check=False
        )

    cold = plan(8102)
    shutil.rmtree(tmp_path / "cache")
    data = tmp_path / "cache" / "data"
    first = plan(8101)
    (merge,) = kept(data / "merged")
    written = merge.stat()
    unseen = plan(8102)
    assert first.stdout.splitlines()[-1] == "0 True" and unseen.stdout.splitlines()[-1] == "0 False"
    assert len(kept(data / "compose")) == 2 and kept(data / "merged") == {merge}
    assert (merge.stat().st_ino, merge.stat().st_mtime_ns) == (written.st_ino, written.st_mtime_ns)  # read, not rebuilt
    verdict = unseen.stdout.rsplit("\n", 2)[0]  # the plan, without the probe's line
    assert (verdict, unseen.stderr) == (cold.stdout.rsplit("\n", 2)[0], cold.stderr) and '"port": 8102' in verdict


def test_a_foreign_pickle_in_the_validator_s_entry_runs_nothing(entries: Path, tmp_path: Path) -> None:
    expected = compose_config(["mesh=cpu"])
    marker = tmp_path / "ran"
    (entries.parent / "validator-ApplianceConfig.pickle").write_bytes(pickle.dumps(("key", Payload(marker))))
    assert compose_config(["mesh=cpu", "serving.port=8101"]).config == replace(
        expected.config, serving=replace(expected.config.serving, port=8101)
    )
    assert not marker.exists()
