"""`render gateway-systemd` and `render gateway-k8s`: the site's gateway hardened as the appliance's own renders are
(systemd-analyze's rating and verify, checkov), its secrets by reference only, bad input refused in one line."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from appliance.config.compose import compose_config
from appliance.control.site_file import load_site_file
from appliance.deploy.gateway_clients import read_client_keys
from appliance.deploy.gateway_k8s import CLIENTS_DIR, CONFIG_DIR, GATEWAY_CLIENT, render_gateway_k8s
from appliance.deploy.k8s import SECRETS_DIR
from appliance.deploy.k8s_policy import CONTROL_CLIENT, ENGINE_CLIENT
from appliance.errors import ConfigError
from testkit.helpers import Cli, checkov_report
from tests.deploy.test_deploy import K8S_VERSION
from tests.deploy.test_k8s_hardening import DIGEST
from tests.deploy.test_systemd_hardening import MAX_EXPOSURE, analyze

PLANTED_KEY = "sk-planted-client-key-0123456789"
PLANTED_TOKEN = "planted-control-token-9876543210"
LONG = "x" * 65  # a client name HAProxy's rules, a credential and a Secret's key could not carry
SITE = (
    "- {name: lab-01, url: http://10.0.4.21:8100, token_env: LAB_01_TOKEN}\n"
    "- {name: lab-02, url: http://tt-appliance-lab.tt-lab.svc:8100}\n"
)


@pytest.fixture
def site(tmp_path: Path) -> tuple[Path, list[str]]:
    """A site file and the overrides of a client whose key file holds PLANTED_KEY."""
    site_file = tmp_path / "lab.yaml"
    site_file.write_text(SITE)
    key = tmp_path / "alice.key"
    key.write_text(PLANTED_KEY + "\n")
    key.chmod(0o600)
    return site_file, [f"gateway.clients.alice={{key_file: '{key}', rate_per_s: 5}}", "gateway.ttft_slo_s=1"]


def render(cli: Cli, kind: str, overrides: list[str], site_file: Path, out: Path, *flags: str) -> list[Path]:
    ran = cli("render", kind, *overrides, "--site-file", str(site_file), "--out", str(out), *flags)
    assert ran.returncode == 0, ran.stderr
    return sorted(out.iterdir())


@pytest.mark.parametrize("clients", [False, True], ids=["open", "clients"])
def test_the_gateway_unit_rates_at_most_2_and_systemd_analyze_verifies_it(
    cli: Cli, tmp_path: Path, site: tuple[Path, list[str]], clients: bool
) -> None:
    (unit,) = render(cli, "gateway-systemd", site[1] if clients else [], site[0], tmp_path / "unit")
    rated = analyze("security", "--offline=true", str(unit))
    found = re.search(rf"Overall exposure level for {re.escape(unit.name)}: (\d+\.\d+) ", rated.stdout)
    assert rated.returncode == 0 and found is not None, rated.stdout + rated.stderr
    assert float(found.group(1)) <= MAX_EXPOSURE, rated.stdout
    verified = analyze("verify", str(unit))
    assert verified.returncode == 0 and verified.stderr == "" and verified.stdout == ""


def test_the_unit_runs_the_gateway_sandboxed_with_its_secrets_by_reference(
    cli: Cli, tmp_path: Path, site: tuple[Path, list[str]]
) -> None:
    (unit,) = render(cli, "gateway-systemd", site[1], site[0], tmp_path / "unit")
    assert unit.name == "tt-appliance-gateway-lab.service"
    lines = unit.read_text().splitlines()
    (exec_start,) = (line for line in lines if line.startswith("ExecStart="))
    assert f" gateway --site-file {site[0]} --listen 0.0.0.0:8080 --out /run/tt-appliance-gateway-lab " in exec_start
    assert exec_start.endswith(" gateway.clients.alice.key_file=%d/alice")  # systemd's copy, not the operator's file
    assert f"LoadCredential=alice:{site[0].parent / 'alice.key'}" in lines
    assert "EnvironmentFile=-/etc/tt-appliance/tt-appliance-gateway-lab.env" in lines
    assert (
        "# control tokens (APPLIANCE_TOKEN, LAB_01_TOKEN) go in /etc/tt-appliance/tt-appliance-gateway-lab.env"
        in (lines[0])
    )
    hardened = {"DynamicUser=yes", "Restart=on-failure", "RuntimeDirectory=tt-appliance-gateway-lab", "UMask=0077"}
    assert hardened | {"RuntimeDirectoryMode=0700", "CapabilityBoundingSet=", "ProtectSystem=strict"} <= set(lines)
    assert not any(line.startswith(("ReadWritePaths=", "MemoryDenyWriteExecute=")) for line in lines)


def test_no_rendered_file_holds_a_key_or_a_token(cli: Cli, tmp_path: Path, site: tuple[Path, list[str]]) -> None:
    env = {"LAB_01_TOKEN": PLANTED_TOKEN, "APPLIANCE_TOKEN": PLANTED_TOKEN}
    for kind in ("gateway-systemd", "gateway-k8s"):
        ran = cli("render", kind, *site[1], "--site-file", str(site[0]), env=env)
        assert ran.returncode == 0 and "alice" in ran.stdout, ran.stderr
        files = render(cli, kind, site[1], site[0], tmp_path / kind)
        for text in [ran.stdout, ran.stderr, *(path.read_text() for path in files)]:
            assert PLANTED_KEY not in text and PLANTED_TOKEN not in text


@pytest.fixture
def manifests(cli: Cli, tmp_path: Path, site: tuple[Path, list[str]]) -> dict[str, Any]:
    paths = render(cli, "gateway-k8s", [*site[1], "site=lab-t3k"], site[0], tmp_path / "k8s")
    return {doc["kind"]: doc for doc in (yaml.safe_load(path.read_text()) for path in paths)}


def test_the_manifests_pass_the_kubernetes_schema_in_the_site_namespace(manifests: dict[str, Any]) -> None:
    assert set(manifests) == {"ServiceAccount", "ConfigMap", "Deployment", "Service", "NetworkPolicy"}
    for doc in manifests.values():
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        assert doc["metadata"]["namespace"] == "tt-lab"


def test_the_pod_reads_its_secrets_as_files_by_name_and_writes_only_volumes(manifests: dict[str, Any]) -> None:
    pod = manifests["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "secretKeyRef" not in str(pod) and "envFrom" not in container
    env = {e["name"]: e["value"] for e in container["env"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert env["APPLIANCE_SECRETS_DIR"] == mounts["secrets"]["mountPath"] == SECRETS_DIR
    assert mounts["secrets"]["readOnly"] and mounts["clients"]["readOnly"] and mounts["config"]["readOnly"]
    assert [i["key"] for i in volumes["secrets"]["secret"]["items"]] == ["APPLIANCE_TOKEN", "LAB_01_TOKEN"]
    assert volumes["clients"]["secret"] == {
        "secretName": "tt-appliance-gateway-lab-clients",
        "items": [{"key": "alice", "path": "alice"}],
        "defaultMode": 0o400,
    }
    assert container["securityContext"]["readOnlyRootFilesystem"] and pod["securityContext"]["runAsNonRoot"]
    writable = {m["mountPath"] for m in mounts.values() if not m.get("readOnly")}
    assert writable == {"/run/tt-appliance-gateway", "/tmp"} and volumes["run"]["emptyDir"]["medium"] == "Memory"
    assert container["command"][-2:] == ["--out", "/run/tt-appliance-gateway"]
    # Behind keys, /v1/models wants one, which a probe would carry by value: the port is probed instead.
    assert container["readinessProbe"]["tcpSocket"] == container["livenessProbe"]["tcpSocket"] == {"port": "openai"}


def test_the_config_maps_layer_composes_to_the_rendered_gateway(manifests: dict[str, Any], tmp_path: Path) -> None:
    data = manifests["ConfigMap"]["data"]
    assert data["site.yaml"] == SITE
    layer = tmp_path / "gateway.yaml"
    layer.write_text(data["gateway.yaml"])
    gateway = compose_config([], host_file=layer).config.gateway
    assert gateway.ttft_slo_s == 1 and gateway.clients["alice"].rate_per_s == 5
    assert gateway.clients["alice"].key_file == f"{CLIENTS_DIR}/alice"
    env = {e["name"]: e["value"] for e in manifests["Deployment"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["APPLIANCE_HOST_FILE"] == f"{CONFIG_DIR}/gateway.yaml"


def test_the_policy_admits_labelled_clients_and_the_pod_reaches_the_appliances(manifests: dict[str, Any]) -> None:
    policy = manifests["NetworkPolicy"]["spec"]
    (ingress,) = policy["ingress"]
    match = {"matchLabels": {GATEWAY_CLIENT: "true"}}
    assert ingress == {
        "from": [{"podSelector": match}, {"namespaceSelector": match}],
        "ports": [{"port": 8080, "protocol": "TCP"}],
    }
    appliances = policy["egress"][1]["to"]
    assert {"ipBlock": {"cidr": "10.0.4.21/32"}} in appliances and len(appliances) == 2
    labels = manifests["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert labels[ENGINE_CLIENT] == labels[CONTROL_CLIENT] == "true"  # what the appliances' policies admit


@pytest.fixture(scope="module")
def checkov(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """checkov over two renders side by side: an open endpoint by digest, and one with a client by tag."""
    out = tmp_path_factory.mktemp("gateway-k8s")
    (out / "lab.yaml").write_text(SITE)
    renders = {"open": ([], DIGEST), "clients": (["gateway.clients.alice={key_file: /keys/alice}"], "tt-appliance:1")}
    for name, (overrides, image) in renders.items():
        gateway = compose_config(overrides).config.gateway
        manifests = render_gateway_k8s(
            SITE,
            load_site_file(out / "lab.yaml"),
            gateway,
            namespace="tt-lab",
            name=f"gw-{name}",
            image=image,
            port=8080,
        )
        manifests.write(out / "render" / name)
    return checkov_report(out / "render")


def test_checkov_fails_no_check_and_skips_only_the_tag_with_its_reason(checkov: dict[str, Any]) -> None:
    summary = checkov["summary"]
    assert checkov["results"]["failed_checks"] == [] and summary["parsing_errors"] == 0
    assert summary["passed"] >= 80 * 2 and summary["resource_count"] >= 10
    skipped = [(c["check_id"], c["file_path"].split("/")[-2]) for c in checkov["results"]["skipped_checks"]]
    assert skipped == [("CKV_K8S_43", "clients")]
    assert (
        "render with --image <name>@sha256:<digest>"
        in checkov["results"]["skipped_checks"][0]["check_result"]["suppress_comment"]
    )


@pytest.mark.parametrize("kind", ["gateway-systemd", "gateway-k8s"])
@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("missing-site", "error[site-file] {tmp}/nowhere.yaml: cannot read it"),
        ("bad-override", "error[bad-value] gateway.ttft_slo_s:"),
        ("privileged-port", "error[gateway-listen] --listen: '0.0.0.0:443' is not host:port with a port from 1024"),
        ("bad-client", f"error[gateway-client] gateway.clients.{LONG}.key_file: the client name '{LONG}' is not 1-64"),
        ("no-site-file", "error[missing-flag] --site-file: "),
    ],
)
def test_bad_input_is_refused_in_one_line_naming_it(
    cli: Cli, tmp_path: Path, site: tuple[Path, list[str]], kind: str, case: str, expected: str
) -> None:
    args = {
        "missing-site": ["--site-file", str(tmp_path / "nowhere.yaml")],
        "bad-override": ["gateway.ttft_slo_s=-1", "--site-file", str(site[0])],
        "privileged-port": ["--site-file", str(site[0]), "--listen", "0.0.0.0:443"],
        "bad-client": [f"gateway.clients.{LONG}={{key_file: /k}}", "--site-file", str(site[0])],
        "no-site-file": [],
    }[case]
    ran = cli("render", kind, *args, "--out", str(tmp_path / "out"))
    assert ran.returncode == 2 and ran.stdout == "" and not (tmp_path / "out").exists()
    assert ran.stderr.startswith(expected.format(tmp=tmp_path)) and len(ran.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="only root makes a root-owned file, as kubelet's")
def test_a_key_file_as_kubelet_mounts_a_secret_is_read_and_only_that_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Secret mounted for the pod's fsGroup is root:<the pod's group> 0440: readable by the gateway's group only."""
    key = tmp_path / "alice"
    key.write_text(PLANTED_KEY)
    key.chmod(0o440)
    clients = compose_config([f"gateway.clients.alice={{key_file: '{key}'}}"]).config.gateway.clients
    with pytest.raises(ConfigError, match="open to group or others"):  # the gateway's own file: owner-only
        read_client_keys(clients)
    monkeypatch.setattr(os, "geteuid", lambda: 10001)
    monkeypatch.setattr(os, "getegid", lambda: key.stat().st_gid)
    assert [c.key for c in read_client_keys(clients)] == [PLANTED_KEY]
    key.chmod(0o444)  # others may read it: refused, however mounted
    with pytest.raises(ConfigError, match="open to group or others"):
        read_client_keys(clients)
