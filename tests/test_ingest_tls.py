"""The QUIC listener's certificate (app/engine/ingest/tls.py)."""

from __future__ import annotations

import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from app.core.errors import ConfigError
from app.engine.ingest import tls
from app.engine.runtime import Runtime


def test_self_signed_names_loopback_and_the_bind_address():
    cert, key = tls.self_signed("10.1.2.3")
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    ips = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    assert {"127.0.0.1", "::1", "10.1.2.3"} <= ips and "localhost" in san.get_values_for_type(x509.DNSName)
    assert cert.issuer == cert.subject and cert.public_key().public_numbers() == key.public_key().public_numbers()
    cert.verify_directly_issued_by(cert)  # really self-signed: raises otherwise
    assert len(tls.fingerprint(cert)) == 64
    assert ipaddress.ip_address("0.0.0.0") not in {ipaddress.ip_address(i) for i in ips}


def test_configured_files_load_and_bad_ones_name_the_setting(tmp_path):
    cert, key = tls.self_signed()
    (tmp_path / "c.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "k.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    got, _ = tls.load(tmp_path / "c.pem", tmp_path / "k.pem")
    assert tls.fingerprint(got) == tls.fingerprint(cert)
    with pytest.raises(ConfigError) as e:
        tls.load(tmp_path / "missing.pem", tmp_path / "k.pem")
    assert e.value.field == "ingest_quic_cert"
    with pytest.raises(ConfigError) as e:
        tls.load(tmp_path / "c.pem", tmp_path / "c.pem")  # a certificate is not a key
    assert e.value.field == "ingest_quic_key"


def test_a_client_that_pins_the_configured_certificate_connects(engine, tmp_path):
    import asyncio

    from app.engine.ingest import Ingest, IngestConfig
    from app.engine.reference import kat
    from app.wire import zap
    from zapverify.ingest import connect

    cert, key = tls.self_signed()
    (tmp_path / "c.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "k.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    items = kat.sign_items("ed25519", 2, seed=3)
    frame = bytes(zap.encode_items("ed25519", [i.public_key for i in items], [i.message for i in items],
                                   [i.signature for i in items]))
    ing = Ingest(Runtime(engine), IngestConfig(quic_port=0, quic_cert=str(tmp_path / "c.pem"),
                                               quic_key=str(tmp_path / "k.pem")))
    ing.start()
    try:
        async def main():
            async with connect("quic", "127.0.0.1", ing.ports["quic"], cafile=str(tmp_path / "c.pem")) as s:
                return await (await s.submit(frame))

        assert asyncio.run(asyncio.wait_for(main(), 30)).valid == 2
        quic = ing.status()["transports"]["quic"]
    finally:
        ing.stop()
    assert quic["certificate"] == "configured" and quic["certificate_sha256"] == tls.fingerprint(cert)
