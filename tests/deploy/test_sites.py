"""Fleet sites: effective overrides from compose's provenance, and a plan per site."""

from __future__ import annotations

import json
from pathlib import Path

from appliance.compat.matrix import CompatibilityMatrix
from appliance.deploy.sites import list_sites, plan_sites
from appliance.host.discovery import discover_host
from testkit.helpers import Cli


def fleet_dir(tmp_path: Path) -> Path:
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "rack7.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /mesh: n300\nsite:\n  name: rack7\n"
        "serving:\n  max_concurrency: 16\n"
    )
    (sites / "broken-rack.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /mesh: t3k\nsite:\n  name: broken-rack\n"
        "serving:\n  max_context: 999999\n"
    )
    return sites


def test_sites_lists_each_site_with_the_keys_and_groups_it_changes(tmp_path: Path) -> None:
    sites = {s.name: s for s in list_sites(fleet_dir(tmp_path))}
    assert {"default", "lab-t3k", "edge-n150", "rack7", "broken-rack"} <= set(sites)
    lab = sites["lab-t3k"]
    assert lab.file == "conf/site/lab-t3k.yaml"
    assert dict(lab.groups) == {"mesh": "t3k", "precision": "performance"}
    assert lab.overrides["serving.max_context"] == 32768 and lab.overrides["features.prefix_caching"] is True
    rack = sites["rack7"]
    assert rack.file == str((tmp_path / "sites" / "rack7.yaml").resolve())
    assert dict(rack.overrides) == {"site.name": "rack7", "serving.max_concurrency": 16}
    assert dict(rack.groups) == {"mesh": "n300"}


def test_plan_all_sites_says_per_site_what_boots_and_what_does_not(tmp_path: Path, matrix: CompatibilityMatrix) -> None:
    plans = {p.name: p for p in plan_sites(["+model=llama"], matrix, discover_host, fleet_dir(tmp_path))}
    assert plans["lab-t3k"].ok and plans["lab-t3k"].plan is not None
    assert plans["lab-t3k"].plan.mesh == "t3k" and "--max-model-len 32768" in plans["lab-t3k"].plan.command_line()
    assert plans["rack7"].ok and plans["rack7"].plan is not None and plans["rack7"].plan.mesh == "n300"
    assert not plans["broken-rack"].ok
    # 999999 is above both the row's validated 131072 and what vLLM derives from the checkpoint's config.json.
    errors = {p.code for p in plans["broken-rack"].problems if p.severity == "error"}
    assert errors == {"context-too-long", "context-above-checkpoint"}
    # default resolves mesh=auto from this host, which has no TT device for a Llama.
    assert {p.code for p in plans["default"].problems} == {"no-tt-device"}


def test_the_cli_lists_sites_and_plans_every_site(cli: Cli, tmp_path: Path) -> None:
    sites = fleet_dir(tmp_path)
    listed = cli("sites", "--site-dir", str(sites), "--json")
    assert listed.returncode == 0, listed.stderr
    assert {s["name"] for s in json.loads(listed.stdout)} >= {"rack7", "lab-t3k"}
    text = cli("sites", "--site-dir", str(sites))
    assert "lab-t3k (conf/site/lab-t3k.yaml) mesh=t3k precision=performance" in text.stdout
    planned = cli("plan", "--all-sites", "+model=llama", "--site-dir", str(sites))
    assert planned.returncode == 2  # broken-rack and default do not validate
    assert "site lab-t3k: meta-llama/Llama-3.3-70B-Instruct on t3k (tt)" in planned.stdout
    assert "site broken-rack: invalid" in planned.stdout and "error[context-too-long]" in planned.stdout
    assert "Traceback" not in planned.stderr
