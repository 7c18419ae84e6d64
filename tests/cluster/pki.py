"""Throw-away keys and certificates for one test control plane, made with the openssl CLI.

The apiserver needs a serving certificate its clients can verify, and a key pair to sign
service-account tokens. Using the openssl command (in every Debian image) avoids adding a
crypto library to the project only for tests.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    """Files of the generated PKI."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    service_account_key: Path


def _openssl(*args: str) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def generate(folder: Path) -> Pki:
    """Create a CA, a serving certificate for 127.0.0.1/localhost and a service-account key."""
    folder.mkdir(parents=True, exist_ok=True)
    pki = Pki(
        ca_cert=folder / "ca.crt",
        serving_cert=folder / "apiserver.crt",
        serving_key=folder / "apiserver.key",
        service_account_key=folder / "sa.key",
    )
    ca_key, csr = folder / "ca.key", folder / "apiserver.csr"
    for key in (ca_key, pki.serving_key, pki.service_account_key):
        _openssl(
            "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(key)
        )
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        str(ca_key),
        "-subj",
        "/CN=eo-test-ca",
        "-days",
        "2",
        "-out",
        str(pki.ca_cert),
    )
    _openssl(
        "req", "-new", "-key", str(pki.serving_key), "-subj", "/CN=kube-apiserver", "-out", str(csr)
    )
    extensions = folder / "apiserver.ext"
    extensions.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default\n"
        "extendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(pki.ca_cert),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        str(extensions),
        "-out",
        str(pki.serving_cert),
    )
    return pki
