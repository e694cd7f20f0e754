"""Signature encodings a client may send: secp256k1 ECDSA signatures as strict DER (SEC 1
§C.5, as Bitcoin and most HSMs emit them) or as 64-byte compact r ‖ s (what every backend
verifies).  Both directions use libsecp256k1 (through coincurve), so "is this DER?" has the
library's answer, the same one the CPU reference gives.  Exported by :mod:`app.client`.
"""

from __future__ import annotations

from typing import Any

_k1: tuple[Any, Any, Any] | None = None


def secp256k1_lib() -> tuple[Any, Any, Any]:
    """(cffi ``ffi``, ``lib``, context pointer) of coincurve's bundled libsecp256k1, loaded once."""
    global _k1
    if _k1 is None:
        from coincurve._libsecp256k1 import ffi, lib
        from coincurve.context import GLOBAL_CONTEXT

        _k1 = (ffi, lib, GLOBAL_CONTEXT.ctx)
    return _k1


def der_to_compact(der: bytes) -> bytes | None:
    """Convert a strict-DER ECDSA signature to 64-byte compact r ‖ s.

    Returns ``None`` when ``der`` is not DER (BER variants included).  r or s out of range
    give the all-zero signature, which never verifies (libsecp256k1's behaviour).
    """
    ffi, lib, c = secp256k1_lib()
    s = ffi.new("secp256k1_ecdsa_signature *")
    if not lib.secp256k1_ecdsa_signature_parse_der(c, s, bytes(der), len(der)):
        return None
    out = ffi.new("unsigned char[64]")
    lib.secp256k1_ecdsa_signature_serialize_compact(c, out, s)
    return bytes(ffi.buffer(out, 64))


def compact_to_der(compact: bytes) -> bytes | None:
    """Convert a 64-byte compact r ‖ s signature to strict DER (at most 72 bytes).

    Returns ``None`` when ``compact`` is not 64 bytes or r or s is not below the group
    order n (such a signature has no DER form libsecp256k1 would produce).
    """
    if len(compact) != 64:
        return None
    ffi, lib, c = secp256k1_lib()
    s = ffi.new("secp256k1_ecdsa_signature *")
    if not lib.secp256k1_ecdsa_signature_parse_compact(c, s, bytes(compact)):
        return None
    out = ffi.new("unsigned char[72]")
    size = ffi.new("size_t *", 72)
    lib.secp256k1_ecdsa_signature_serialize_der(c, out, size, s)
    return bytes(ffi.buffer(out, size[0]))


def compact_signature(sig: bytes, signature_format: str) -> bytes:
    """The 64-byte compact form of a secp256k1 signature sent as ``raw`` or ``der``.

    A DER signature that does not parse becomes the empty signature, which is invalid by
    length: the item gets a ``False`` verdict and its Merkle leaf commits to empty bytes.
    """
    if signature_format == "raw":
        return bytes(sig)
    return der_to_compact(sig) or b""
