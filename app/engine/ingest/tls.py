"""The QUIC listener's TLS 1.3 certificate (RFC 9001): configured, or self-signed at start.

A self-signed certificate is made with the ``cryptography`` library: an ECDSA P-256 key
(FIPS 186-5), subject and issuer ``CN=zapverify ingest``, subjectAltName ``localhost``,
``127.0.0.1``, ``::1`` and the bind address when it is an IP, valid from one hour ago for
``days`` days.  Clients then either skip verification (``zapverify bench``, the tests) or
pin its SHA-256 fingerprint, which ``/v1/status`` shows.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from app.core.errors import ConfigError


def self_signed(bind_host: str = "127.0.0.1", days: int = 365) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A fresh self-signed (certificate, private key) for ``bind_host``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "zapverify ingest")])
    alt: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                   x509.IPAddress(ipaddress.ip_address("::1"))]
    try:
        ip = ipaddress.ip_address(bind_host)
        if not ip.is_unspecified and x509.IPAddress(ip) not in alt:
            alt.append(x509.IPAddress(ip))
    except ValueError:  # a host name
        if bind_host and bind_host != "localhost":
            alt.append(x509.DNSName(bind_host))
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def load(cert_path: str | Path, key_path: str | Path) -> tuple[x509.Certificate, object]:
    """A configured PEM certificate and private key.

    Raises :class:`ConfigError` (field ``ingest_quic_cert`` / ``ingest_quic_key``) when a
    file cannot be read or parsed.
    """
    try:
        cert = x509.load_pem_x509_certificate(Path(cert_path).read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"QUIC certificate {cert_path}: {exc}", field="ingest_quic_cert") from exc
    try:
        key = serialization.load_pem_private_key(Path(key_path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"QUIC private key {key_path}: {exc}", field="ingest_quic_key") from exc
    return cert, key


def fingerprint(cert: x509.Certificate) -> str:
    """The certificate's SHA-256 fingerprint, lowercase hex."""
    return cert.fingerprint(hashes.SHA256()).hex()
