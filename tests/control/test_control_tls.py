"""TLS for the control API: served by the same server, verified by the clients, its bad files refused in one line.

Certificates are made by the test with `cryptography` (a CA, a server certificate for 127.0.0.1, an expired one,
a key that is not the certificate's, another CA); the control API is the real create_app served by uvicorn.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from appliance.compat.matrix import CompatibilityMatrix
from appliance.compat.validate import validate
from appliance.config.compose import compose_config
from appliance.config.schema import ControlTls, GatewayConfig
from appliance.control.client import ControlClient, SyncControlClient, Target
from appliance.deploy.gateway import backend, render_gateway, run_haproxy, write_gateway
from appliance.deploy.k8s import POD_OVERRIDES, render_k8s
from appliance.errors import ApiError, ConfigError
from appliance.preflight.tls_files import check_server_files
from testkit.appliance_process import free_ports
from testkit.helpers import TINY, Cli
from testkit.recorded_appliance import recorded_api, serving

TOKEN = "tls-token"
NOW = dt.datetime.now(dt.UTC)


@dataclass(frozen=True)
class Pki:
    ca: Path
    cert: Path
    key: Path
    expired: Path
    other_key: Path
    other_ca: Path


def _key(path: Path) -> ec.EllipticCurvePrivateKey:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    path.write_bytes(pem)
    path.chmod(0o600)
    return key


def _ca(path: Path, name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key(path.with_suffix(".key"))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(days=1))
        .not_valid_after(NOW + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _leaf(path: Path, key_path: Path, ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey], days: int) -> None:
    key = _key(key_path)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(days=2))
        .not_valid_after(NOW + dt.timedelta(days=days))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .sign(ca[1], hashes.SHA256())
    )
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("pki")
    ca = _ca(root / "ca.pem", "appliance test CA")
    _leaf(root / "cert.pem", root / "cert.key", ca, 10)
    _leaf(root / "expired.pem", root / "expired.key", ca, -1)
    _key(root / "other.key")
    _ca(root / "other-ca.pem", "another CA")
    return Pki(
        root / "ca.pem",
        root / "cert.pem",
        root / "cert.key",
        root / "expired.pem",
        root / "other.key",
        root / "other-ca.pem",
    )


def tls_of(pki: Pki, **change: Path) -> ControlTls:
    files = {"cert_file": pki.cert, "key_file": pki.key, "ca_file": pki.ca} | change
    return ControlTls(**{k: str(v) for k, v in files.items()})


def test_the_clients_verify_the_control_api_served_over_tls(pki: Pki) -> None:
    with recorded_api(TOKEN) as api, serving(api.app, tls_of(pki)) as url:
        assert url.startswith("https://")
        with SyncControlClient(Target("tls", url, TOKEN, str(pki.ca))) as client:
            assert client.state().state == "ready"

        async def asynchronous() -> str:
            async with ControlClient([Target("tls", url, TOKEN, str(pki.ca))]) as polled:
                return (await polled.state("tls")).state

        assert asyncio.run(asynchronous()) == "ready"
        with (
            pytest.raises(ApiError, match="CERTIFICATE_VERIFY_FAILED"),
            SyncControlClient(Target("t", url, TOKEN)) as c,
        ):
            c.state()  # the system's trust store does not know the test's CA
        plain = url.replace("https://", "http://")
        with pytest.raises(ApiError) as dropped, SyncControlClient(Target("tls", plain, TOKEN)) as client:
            client.state()
        assert "\n" not in str(dropped.value) and "use its https:// URL (with --ca-file)" in str(dropped.value)


def test_status_over_tls_from_the_command_line(cli: Cli, pki: Pki) -> None:
    with recorded_api(TOKEN) as api, serving(api.app, tls_of(pki)) as url:
        done = cli("status", "--url", url, "--ca-file", str(pki.ca), env={"APPLIANCE_TOKEN": TOKEN})
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("ready")
        plain = cli("status", "--url", url.replace("https", "http"), env={"APPLIANCE_TOKEN": TOKEN})
        assert plain.returncode == 4 and len(plain.stderr.strip().splitlines()) == 1
        assert "https://" in plain.stderr


@pytest.mark.parametrize(
    ("change", "code", "names"),
    [
        ({"cert_file": "expired"}, "tls-cert-expired", "expired.pem"),
        ({"key_file": "other_key"}, "tls-cert-key-mismatch", "other.key"),
        ({"ca_file": "other_ca"}, "tls-ca-mismatch", "other-ca.pem"),
        ({"key_file": "missing"}, "tls-file", "missing.key"),
    ],
    ids=["expired", "mismatched-key", "wrong-ca", "missing-key"],
)
def test_a_bad_tls_file_is_one_line_naming_it(pki: Pki, change: dict[str, str], code: str, names: str) -> None:
    files = {
        "expired": pki.expired,
        "other_key": pki.other_key,
        "other_ca": pki.other_ca,
        "missing": pki.key.parent / "missing.key",
    }
    key = next(iter(change))
    if change[key] == "expired":  # the expired certificate comes with its own key
        tls = tls_of(pki, cert_file=pki.expired, key_file=pki.key.parent / "expired.key")
    else:
        tls = tls_of(pki, **{key: files[change[key]]})
    with pytest.raises(ConfigError) as refused:
        check_server_files(tls)
    (problem,) = refused.value.problems
    assert problem.code == code and names in problem.message and problem.key.startswith("control.tls.")


def test_a_key_others_can_read_is_refused_before_anything_binds(cli: Cli, pki: Pki, tmp_path: Path) -> None:
    exposed = tmp_path / "exposed.key"
    exposed.write_bytes(pki.key.read_bytes())
    exposed.chmod(0o644)
    with pytest.raises(ConfigError, match="tls-key-exposed.*mode 0644"):
        check_server_files(tls_of(pki, key_file=exposed))
    done = cli(
        "serve",
        "--no-probe",
        TINY,
        "mesh=cpu",
        f"engine.python={sys.executable}",
        f"control.tls={{cert_file: {pki.cert}, key_file: {exposed}, ca_file: {pki.ca}}}",
        env={"APPLIANCE_TOKEN": TOKEN},
    )
    assert done.returncode == 3  # a fact of this host (README: exit codes)
    (line,) = done.stderr.strip().splitlines()[-1:]
    assert line.startswith("error[tls-key-exposed] control.tls.key_file: ") and str(exposed) in line
    assert "control API:" not in done.stdout


def test_a_real_haproxy_routes_only_to_an_appliance_whose_tls_readiness_it_verified(pki: Pki, tmp_path: Path) -> None:
    """HAProxy checks the TLS control API's /readyz with the CA: with the right one the engine gets the request,
    with another the check fails and the gateway has no server to send it to."""
    engine = Starlette(routes=[Route("/v1/completions", lambda _: JSONResponse({}), methods=["POST"])])
    with recorded_api(TOKEN) as api, serving(api.app, tls_of(pki)) as control, serving(engine) as engine_url:
        for ca, status in ((pki.ca, 200), (pki.other_ca, 503)):
            port = free_ports(1)[0]
            checked = backend("a", engine_url, control, str(ca), model="m")
            files = render_gateway([checked], f"127.0.0.1:{port}", tmp_path / str(status), GatewayConfig(), (), 200)
            proxy = run_haproxy(write_gateway(files, tmp_path / str(status)))
            try:
                time.sleep(1.5)  # a few checks at 200 ms
                reply = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"model": "m"}, timeout=10)
                assert reply.status_code == status
            finally:
                proxy.terminate()
                proxy.wait(timeout=10)


def test_the_gateway_checks_a_tls_control_api_with_its_ca() -> None:
    checked = backend("a", "http://10.0.0.1:8000", "https://10.0.0.1:8100", "/etc/tt-appliance/ca.pem", model="m")
    plain = backend("b", "http://10.0.0.2:8000", "http://10.0.0.2:8100", model="m")
    config = render_gateway([checked, plain], "127.0.0.1:9000", Path("/run/gw"), GatewayConfig()).config
    assert (
        "server a 10.0.0.1:8000 check addr 10.0.0.1 port 8100 check-ssl verify required ca-file "
        "/etc/tt-appliance/ca.pem"
    ) in config
    assert "server b 10.0.0.2:8000 check addr 10.0.0.2 port 8100\n" in config + "\n"


def test_the_pod_probes_its_tls_control_port_and_its_prestop_hook_verifies_it(matrix: CompatibilityMatrix) -> None:
    tls = "control.tls={cert_file: /etc/tt/tls.crt, key_file: /etc/tt/tls.key, ca_file: /etc/tt/ca.crt}"
    validated = validate(compose_config([*POD_OVERRIDES, "+model=llama", "mesh=t3k", tls]), matrix)
    docs = {d["kind"]: d for d in yaml.safe_load_all(render_k8s(validated, image="x").yaml())}
    container = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert "scheme" not in container["startupProbe"]["httpGet"]  # the engine's own port stays plain
    hook = container["lifecycle"]["preStop"]["exec"]["command"]
    assert (
        hook[hook.index("--url") + 1] == "https://127.0.0.1:8100"
        and hook[hook.index("--ca-file") + 1] == "/etc/tt/ca.crt"
    )
    mounted = {m["mountPath"]: m["subPath"] for m in container["volumeMounts"] if m["name"] == "control-tls"}
    assert mounted == {"/etc/tt/tls.crt": "tls.crt", "/etc/tt/tls.key": "tls.key", "/etc/tt/ca.crt": "ca.crt"}
