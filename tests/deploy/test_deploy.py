"""Kubernetes manifests and systemd units rendered from real configs, checked by real validators."""

from __future__ import annotations

import hashlib
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from appliance.compat.matrix import CompatibilityMatrix
from appliance.compat.validate import ValidatedConfig, validate
from appliance.config.compose import GROUPS, compose_config
from appliance.deploy.k8s import DEVICE_CLASS, POD_OVERRIDES, K8sManifests, render_k8s
from appliance.deploy.k8s_weights import FETCH_CONTAINER
from appliance.deploy.systemd import render_systemd
from appliance.plan import build_plan
from appliance.weights.layout import lock_path
from appliance.weights.lock import Lock, LockedFile, write_lock
from testkit.helpers import Cli

# kubernetes-validate 1.37.0 ships the v1.37 schema, which has resource.k8s.io/v1 ResourceClaimTemplate.
K8S_VERSION = "1.37.0"
CONFIGS = {
    "lab-t3k": ("site=lab-t3k", "+model=llama"),
    "edge-n150": ("site=edge-n150", "+model=llama"),
    # The Galaxy class's sampling capability is unverified: offline, the row's on-device sampling is refused.
    "galaxy": (
        "+model=llama",
        "mesh=galaxy",
        "model.checkpoint=meta-llama/Llama-3.3-70B-Instruct",
        "features.sample_on_device=off",
    ),
    "cpu": ("mesh=cpu",),
    "tls": (
        "+model=llama",
        "mesh=t3k",
        "control.tls={cert_file: /etc/tt-appliance/tls/tls.crt, "
        "key_file: /etc/tt-appliance/tls/tls.key, ca_file: /etc/tt-appliance/tls/ca.crt}",
    ),
}


CHECKPOINT, REVISION = "HuggingFaceTB/SmolLM2-135M-Instruct", hashlib.sha1(b"the site's pinned commit").hexdigest()
PINNED = (
    "model=smollm2",
    "mesh=cpu",
    f"model.checkpoint={CHECKPOINT}",
    f"model.revision={REVISION}",
    "site.weights.mirror=http://mirror.lab:8080",
)
"""SmolLM2 as the hub publishes it, pinned, from a site mirror on a port of its own."""


def record_lock(locks: Path) -> Path:
    """The site's weights lock of PINNED's revision in `locks`, as its first fetch records it."""
    path = lock_path(locks, CHECKPOINT, REVISION)
    write_lock(
        path,
        Lock(
            CHECKPOINT,
            REVISION,
            datetime.now(UTC),
            "http://mirror.lab:8080",
            (LockedFile("model.safetensors", 3, "0" * 64),),
        ),
    )
    return path


def pinned(locks: Path) -> tuple[str, ...]:
    """PINNED with its lock recorded in `locks` and a hub token the site reads from a file."""
    record_lock(locks)
    return (*PINNED, f"site.weights.locks_dir={locks}", "site.weights.token_file=/etc/tt-appliance/hf-token")


def validated(matrix: CompatibilityMatrix, *overrides: str) -> ValidatedConfig:
    return validate(compose_config([*POD_OVERRIDES, *overrides]), matrix)


def rendered(matrix: CompatibilityMatrix, name: str) -> K8sManifests:
    return render_k8s(validated(matrix, *CONFIGS[name]), image="registry.example/tt-appliance:0.1.0")


def kinds(manifests: K8sManifests) -> dict[str, Any]:
    return {doc["kind"]: doc for doc in manifests.documents}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_rendered_manifest_passes_the_kubernetes_schema(matrix: CompatibilityMatrix, name: str) -> None:
    manifests = rendered(matrix, name)
    for doc in yaml.safe_load_all(manifests.yaml()):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize(
    ("name", "count", "board"), [("lab-t3k", 4, "n300"), ("edge-n150", 1, "n150"), ("galaxy", 32, "galaxy-wormhole")]
)
def test_tt_boards_are_claimed_through_dra_by_count_and_board_name(
    matrix: CompatibilityMatrix, name: str, count: int, board: str
) -> None:
    docs = kinds(rendered(matrix, name))
    request = docs["ResourceClaimTemplate"]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request["deviceClassName"] == DEVICE_CLASS and request["count"] == count
    assert (
        request["selectors"][0]["cel"]["expression"] == f'device.attributes["tenstorrent.com"].boardName == "{board}"'
    )
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    assert pod["resourceClaims"][0]["resourceClaimTemplateName"] == docs["ResourceClaimTemplate"]["metadata"]["name"]
    resources = pod["containers"][0]["resources"]
    assert resources["claims"] == [{"name": "boards"}]
    assert resources["requests"]["hugepages-1Gi"] == resources["limits"]["hugepages-1Gi"]
    assert pod["containers"][0]["securityContext"]["privileged"] is False and "/dev/tenstorrent" not in str(pod)


def test_a_cpu_deployment_claims_no_boards_and_no_hugepages(matrix: CompatibilityMatrix) -> None:
    docs = kinds(rendered(matrix, "cpu"))
    assert "ResourceClaimTemplate" not in docs
    assert "hugepages" not in str(docs["Deployment"])


def test_probes_are_sized_from_the_readiness_budget(matrix: CompatibilityMatrix) -> None:
    config = validated(matrix, *CONFIGS["lab-t3k"])
    container = kinds(render_k8s(config, image="x"))["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    startup = container["startupProbe"]
    assert startup["httpGet"] == {"path": "/health", "port": "openai"}
    assert startup["periodSeconds"] * startup["failureThreshold"] >= config.config.engine.ready_timeout_s == 3600
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "control"}


def test_readiness_leads_the_drain_and_the_pod_drains_before_sigterm(matrix: CompatibilityMatrix) -> None:
    config = validated(matrix, *CONFIGS["lab-t3k"])
    pod = kinds(render_k8s(config, image="x"))["Deployment"]["spec"]["template"]["spec"]
    container, sup = pod["containers"][0], config.config.supervisor
    readiness = container["readinessProbe"]
    assert readiness["httpGet"] == {"path": "/readyz", "port": "control"} and readiness["failureThreshold"] == 1
    assert readiness["periodSeconds"] * 2 <= sup.deregister_s == 5.0
    drain = container["lifecycle"]["preStop"]["exec"]["command"]
    assert drain[:4] == ["appliance", "drain", "--url", "http://127.0.0.1:8100"]
    assert drain[4:6] == ["--token-file", "/run/secrets/tt-appliance/APPLIANCE_TOKEN"]
    assert pod["terminationGracePeriodSeconds"] > sup.deregister_s + sup.shutdown_timeout_s + sup.stop_grace_s


def test_secrets_are_referenced_by_name_and_never_carry_a_value(matrix: CompatibilityMatrix) -> None:
    docs = kinds(rendered(matrix, "lab-t3k"))
    volumes = docs["Deployment"]["spec"]["template"]["spec"]["volumes"]
    sources = next(v for v in volumes if v["name"] == "secrets")["projected"]["sources"]
    assert {s["secret"]["name"] for s in sources} == {"tt-appliance-lab-t3k-secrets"}
    keys = {item["key"] for s in sources for item in s["secret"]["items"]}
    assert keys == {"APPLIANCE_TOKEN", "HF_TOKEN", "LAB_OPENAI_KEY"}
    assert "Secret" not in docs


def test_the_configmap_recomposes_to_the_rendered_config(matrix: CompatibilityMatrix, tmp_path: Path) -> None:
    config = validated(matrix, *CONFIGS["lab-t3k"])
    docs = kinds(render_k8s(config, image="x"))
    host_file = tmp_path / "config.yaml"
    host_file.write_text(docs["ConfigMap"]["data"]["config.yaml"])
    container = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:2] == ["appliance", "serve"]
    in_pod = compose_config(container["command"][2:], host_file=host_file)
    assert in_pod.config == config.config
    assert {g for g in GROUPS if g != "site"} == {arg.split("=")[0] for arg in container["command"][2:]}


def test_render_k8s_writes_one_file_per_manifest(cli: Cli, tmp_path: Path) -> None:
    done = cli("render", "k8s", "site=edge-n150", "+model=llama", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    files = sorted(p.name for p in tmp_path.iterdir())
    kinds = ["configmap", "deployment", "networkpolicy", "resourceclaimtemplate", "service", "serviceaccount"]
    assert files == [f"{kind}.yaml" for kind in kinds]
    for path in tmp_path.iterdir():
        kubernetes_validate.validate(yaml.safe_load(path.read_text()), K8S_VERSION, strict=True)


def test_the_systemd_unit_waits_for_readiness_and_drains_on_stop(matrix: CompatibilityMatrix) -> None:
    plan = build_plan(validate(compose_config(["site=lab-t3k", "+model=llama"]), matrix))
    unit = render_systemd(plan, ["site=lab-t3k", "+model=llama"], appliance="/opt/appliance/bin/appliance")
    lines = set(unit.text.splitlines())
    assert {"Type=notify", "NotifyAccess=main", "KillMode=mixed", "SuccessExitStatus=143"} <= lines
    assert "ExecStart=/opt/appliance/bin/appliance serve site=lab-t3k +model=llama" in lines
    assert f"TimeoutStartSec={int(plan.ready_timeout_s) + 300}" in lines
    assert f"EnvironmentFile=-{unit.env_file}" in lines and unit.name == "tt-appliance-lab-t3k.service"


def test_the_systemd_unit_escapes_what_systemd_would_expand(matrix: CompatibilityMatrix) -> None:
    plan = build_plan(validate(compose_config(["mesh=cpu"]), matrix))
    unit = render_systemd(plan, ["site.description=50% $HOME"], appliance="/bin/appliance")
    assert "ExecStart=/bin/appliance serve 'site.description=50%% $$HOME'" in unit.text


def test_systemd_analyze_accepts_the_rendered_unit(cli: Cli, tmp_path: Path) -> None:
    done = cli("render", "systemd", "site=lab-t3k", "+model=llama", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    unit = tmp_path / "tt-appliance-lab-t3k.service"
    verified = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0 and verified.stderr == "" and verified.stdout == ""


def test_the_schema_check_rejects_a_claim_with_a_misspelt_request(matrix: CompatibilityMatrix) -> None:
    claim = yaml.safe_load(yaml.safe_dump(kinds(rendered(matrix, "lab-t3k"))["ResourceClaimTemplate"]))
    request = claim["spec"]["spec"]["devices"]["requests"][0]
    request["exact"] = request.pop("exactly")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(claim, K8S_VERSION, strict=True)


@pytest.mark.parametrize(("name", "surge", "unavailable"), [("lab-t3k", 0, 1), ("cpu", 1, 0)])
def test_a_rollout_moves_one_pod_at_a_time_and_a_device_bound_pod_never_surges(
    matrix: CompatibilityMatrix, name: str, surge: int, unavailable: int
) -> None:
    config = validated(matrix, *CONFIGS[name])
    spec = kinds(render_k8s(config, image="x", replicas=3))["Deployment"]["spec"]
    assert spec["replicas"] == 3 and spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable},
    }
    assert spec["progressDeadlineSeconds"] > config.config.engine.ready_timeout_s


def test_gates_are_a_step_the_rollout_waits_on_through_readiness(cli: Cli, tmp_path: Path) -> None:
    gates = tmp_path / "gates.yaml"
    gates.write_text("baseline: {accuracy: 0.68, goodput: 1.2, ttft_p95: 350}\ngates: {eval_tolerance: 0.05}\n")
    done = cli("render", "k8s", "site=lab-t3k", "+model=llama", "--gates", str(gates), "--out", str(tmp_path / "k8s"))
    assert done.returncode == 0, done.stderr
    docs = {p.stem: yaml.safe_load(p.read_text()) for p in (tmp_path / "k8s").iterdir()}
    for doc in docs.values():
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    pod = docs["deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"][:4] == ["appliance", "serve", "--gates", "/etc/tt-appliance/gates/gates.yaml"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "gates")
    volume = next(v for v in pod["volumes"] if v["name"] == "gates")
    gate_maps = [d for d in docs.values() if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-gates")]
    assert (
        mount["mountPath"] == "/etc/tt-appliance/gates" and volume["configMap"]["name"] == "tt-appliance-lab-t3k-gates"
    )
    assert [m["data"]["gates.yaml"] for m in gate_maps] == [gates.read_text()]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"  # held at 503 until the gates pass


def test_a_gate_file_the_pod_would_refuse_is_refused_at_render(cli: Cli, tmp_path: Path) -> None:
    gates = tmp_path / "gates.yaml"
    gates.write_text("baseline: {accuracy: 0.68}\n")  # the workload gate runs, and has no baseline
    done = cli("render", "k8s", "site=lab-t3k", "+model=llama", "--gates", str(gates))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        f"error[gate-file] {gates}:baseline: the workload gate needs goodput, ttft_p95. "
        "Record it, or add workload to gates.skip"
    )


def test_a_pinned_checkpoint_is_fetched_into_the_nodes_store_before_the_engine_starts(
    matrix: CompatibilityMatrix, tmp_path: Path
) -> None:
    config = validated(matrix, *pinned(tmp_path / "locks"))
    weights = build_plan(config).weights
    assert weights is not None
    manifests = render_k8s(config, image="x")
    for doc in yaml.safe_load_all(manifests.yaml()):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    pod = kinds(manifests)["Deployment"]["spec"]["template"]["spec"]
    (fetch,), (engine,) = pod["initContainers"], pod["containers"]
    assert fetch["name"] == FETCH_CONTAINER and fetch["command"] == ["appliance", "fetch", *engine["command"][2:]]
    assert fetch["securityContext"] == engine["securityContext"] and fetch["imagePullPolicy"] == "Always"
    assert fetch["resources"]["limits"] == engine["resources"]["limits"] and "ports" not in fetch
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {c["name"]: {m["name"]: m for m in c["volumeMounts"]} for c in (fetch, engine)}
    assert volumes["weights"]["hostPath"] == {"path": weights.store, "type": "Directory"}  # node-local, shared
    assert mounts[FETCH_CONTAINER]["weights"] == {"name": "weights", "mountPath": weights.store, "readOnly": False}
    assert mounts["appliance"]["weights"] == {"name": "weights", "mountPath": weights.store, "readOnly": True}
    # The site's lock, where the pod's own composition of its config looks for it.
    maps = {d["metadata"]["name"]: d["data"] for d in manifests.documents if d["kind"] == "ConfigMap"}
    assert maps["tt-appliance-default-weights-lock"] == {"lock.json": Path(weights.lock_file).read_text()}
    host_file = tmp_path / "config.yaml"
    host_file.write_text(maps["tt-appliance-default-config"]["config.yaml"])
    in_pod = build_plan(validate(compose_config(fetch["command"][2:], host_file=host_file), matrix)).weights
    assert in_pod is not None and in_pod.entry == weights.entry
    (item,) = volumes["weights-lock"]["configMap"]["items"]
    for container in (FETCH_CONTAINER, "appliance"):
        mount = mounts[container]["weights-lock"]
        assert mount["readOnly"] and str(Path(mount["mountPath"]) / item["path"]) == in_pod.lock_file
    # The hub token: the Secret's key as a file at the path the config names, for the fetch only; never a value.
    assert volumes["weights-token"]["secret"] == {
        "secretName": "tt-appliance-default-secrets",
        "defaultMode": 0o400,
        "items": [{"key": "HF_TOKEN", "path": "token"}],
    }
    assert mounts[FETCH_CONTAINER]["weights-token"] == {
        "name": "weights-token",
        "subPath": "token",
        "readOnly": True,
        "mountPath": "/etc/tt-appliance/hf-token",
    }
    assert "weights-token" not in mounts["appliance"] and "secretKeyRef" not in str(pod)
    assert {e["name"] for e in fetch["env"]} == {"APPLIANCE_HOST_FILE", "HOME", "USER"}
    egress = kinds(manifests)["NetworkPolicy"]["spec"]["egress"]
    assert {p["port"] for rule in egress for p in rule["ports"]} == {53, 443, 8080}  # the mirror's port


def test_a_pin_ships_the_sites_lock_and_one_without_a_lock_is_refused_at_render(cli: Cli, tmp_path: Path) -> None:
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "lab.yaml").write_text("# @package _global_\nsite: {name: lab}\n")
    args = ("render", "k8s", "site=lab", *PINNED, "--site-dir", str(sites), "--out", str(tmp_path / "k8s"))
    refused = cli(*args)
    assert refused.returncode == 2 and refused.stdout == "" and len(refused.stderr.splitlines()) == 1
    assert refused.stderr.startswith("error[weights-lock-missing] model.revision: ")
    assert not (tmp_path / "k8s").exists()
    lock = record_lock(sites / "weights-locks")
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    shipped = yaml.safe_load((tmp_path / "k8s" / "configmap-weights-lock.yaml").read_text())
    assert shipped["data"]["lock.json"] == lock.read_text()
    pod = yaml.safe_load((tmp_path / "k8s" / "deployment.yaml").read_text())["spec"]["template"]["spec"]
    mount = next(m for m in pod["initContainers"][0]["volumeMounts"] if m["name"] == "weights-lock")
    assert mount["mountPath"] == "/run/tt-appliance/weights-locks"  # no site directory in the pod: its state dir
