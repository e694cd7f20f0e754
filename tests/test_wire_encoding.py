"""secp256k1 signature encodings: strict DER <-> compact r ‖ s, as the client exports them."""

from __future__ import annotations

import coincurve
import pytest

from app.core.encoding import compact_signature
from app.engine.reference import kat, reference
from zapverify import compact_to_der, der_to_compact

#: secp256k1 group order n (SEC 2 §2.4.1).
N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


def _der_int(v: int) -> bytes:
    b = v.to_bytes(33, "big").lstrip(b"\0")
    pad = b"\0" if b[0] >> 7 else b""
    return b"\x02" + bytes([len(b) + len(pad)]) + pad + b


def _der(r: int, s: int) -> bytes:
    body = _der_int(r) + _der_int(s)
    return b"\x30" + bytes([len(body)]) + body


def test_der_written_by_hand_converts_to_the_signed_compact_form():
    item = kat.sign_items("secp256k1", 1, seed=5)[0]
    r, s = int.from_bytes(item.signature[:32], "big"), int.from_bytes(item.signature[32:], "big")
    der = _der(r, s)
    assert der_to_compact(der) == item.signature
    assert der_to_compact(der + b"\0") is None  # trailing garbage: not DER
    assert compact_signature(b"\x30\x00", "der") == b""  # unparsable -> empty, invalid by length
    assert compact_signature(item.signature, "raw") == item.signature


def test_compact_to_der_round_trips_and_verifies():
    for item in kat.sign_items("secp256k1", 4, seed=9):
        der = compact_to_der(item.signature)
        r = int.from_bytes(item.signature[:32], "big")
        s = int.from_bytes(item.signature[32:], "big")
        assert der == _der(r, s) and len(der) <= 72
        assert der_to_compact(der) == item.signature
        # coincurve (libsecp256k1) accepts the DER form for the same key and message.
        assert coincurve.PublicKey(item.public_key).verify(der, item.message)
        assert reference.verify_secp256k1(item.public_key, item.message, der_to_compact(der))


@pytest.mark.parametrize("bad", [bytes(63), bytes(65), N.to_bytes(32, "big") + (1).to_bytes(32, "big")])
def test_compact_to_der_refuses_wrong_length_and_out_of_range(bad):
    assert compact_to_der(bad) is None
