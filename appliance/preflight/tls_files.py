"""The control API's TLS files judged before anything binds (control.tls): one line naming the file, exit 2.

`validate`, `plan` and `serve` all run it (preflight/launch.py), so a key others can read is refused before boot
wherever the config is judged.
"""

from __future__ import annotations

import datetime as dt
import os
import ssl
import stat
from pathlib import Path
from typing import NoReturn

from appliance.config.schema import ControlTls
from appliance.errors import ConfigError, Problem

__all__ = ["check_server_files"]


def check_server_files(tls: ControlTls, now: dt.datetime | None = None) -> None:
    """ConfigError (one line naming the file) for a key others can read, a certificate that does not match its
    key, has expired or is not yet valid, or a CA that does not verify it."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature

    cert_pem = _read("control.tls.cert_file", tls.cert_file)
    _read("control.tls.key_file", tls.key_file)  # an unreadable key is named here; ssl loads it below
    mode = stat.S_IMODE(os.stat(tls.key_file).st_mode)
    if mode & 0o077:
        _refuse(
            "tls-key-exposed",
            "control.tls.key_file",
            f"{tls.key_file} is readable by others (mode {mode:04o})",
            f"chmod 600 {tls.key_file}",
        )
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(tls.cert_file, tls.key_file)
    except ssl.SSLError as error:
        _refuse(
            "tls-cert-key-mismatch",
            "control.tls.key_file",
            f"{tls.key_file} is not the key of {tls.cert_file} ({error.reason or error})",
            "Give the key the certificate was issued for",
        )
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as error:
        _refuse(
            "tls-cert-invalid",
            "control.tls.cert_file",
            f"{tls.cert_file} is not a PEM certificate ({error})",
            "Give the PEM file of the certificate",
        )
    moment = now or dt.datetime.now(dt.UTC)
    if moment > cert.not_valid_after_utc:
        _refuse(
            "tls-cert-expired",
            "control.tls.cert_file",
            f"{tls.cert_file} expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC",
            "Renew the certificate",
        )
    if moment < cert.not_valid_before_utc:
        _refuse(
            "tls-cert-expired",
            "control.tls.cert_file",
            f"{tls.cert_file} is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC",
            "Check the clock or the certificate",
        )
    if tls.ca_file is None:
        return
    try:
        authorities = x509.load_pem_x509_certificates(_read("control.tls.ca_file", tls.ca_file))
    except ValueError as error:
        _refuse(
            "tls-ca-invalid",
            "control.tls.ca_file",
            f"{tls.ca_file} holds no PEM certificate ({error})",
            "Give the PEM bundle of the CA",
        )
    for authority in authorities:
        try:
            cert.verify_directly_issued_by(authority)
            return
        except (ValueError, TypeError, InvalidSignature):
            continue
    _refuse(
        "tls-ca-mismatch",
        "control.tls.ca_file",
        f"{tls.ca_file} does not verify {tls.cert_file} (issued by {cert.issuer.rfc4514_string()})",
        "Give the CA that issued the certificate",
    )


def _read(key: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        _refuse("tls-file", key, f"{path}: {error.strerror}", "Give a readable PEM file")


def _refuse(code: str, key: str, message: str, fix: str) -> NoReturn:
    raise ConfigError((Problem(code=code, key=key, message=message, fix=fix),))
