"""Signature encodings a client may send (the registry's
:data:`~app.core.schemes.SIGNATURE_FORMATS`; each scheme names those it accepts):
``raw``, the scheme's own encoding, and for ECDSA (secp256k1, P-256) ``der``, strict DER
(SEC 1 §C.5, as Bitcoin, X.509 and most HSMs emit them), read into the 64-byte compact
r ‖ s every backend verifies.  Both directions use libsecp256k1 (through coincurve), so "is
this DER?" has the library's answer, the same one the CPU reference gives.  The read does
not depend on the curve: r or s ≥ secp256k1's n (> P-256's n) become the all-zero
signature, invalid on both curves, and a P-256 r or s in [n_P256, n_k1) is kept and refused
by the verifier's range check.  Exported by :mod:`zapverify`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.core.schemes import SIGNATURE_FORMATS, Scheme

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


def _der(sig: bytes) -> bytes:
    # Not DER -> the empty signature, invalid by length (see compact_signature).
    return der_to_compact(sig) or b""


#: How a signature sent in each format of SIGNATURE_FORMATS becomes the verifier's bytes.
_READERS: dict[str, Callable[[bytes], bytes]] = {"raw": bytes, "der": _der}
if set(_READERS) != set(SIGNATURE_FORMATS):  # the registry and this table name the same formats
    raise ValueError(f"signature formats {sorted(SIGNATURE_FORMATS)} but readers for {sorted(_READERS)}")


def compact_signature(sig: bytes, signature_format: str) -> bytes:
    """The 64-byte compact form of an ECDSA signature (secp256k1, P-256) sent as ``raw`` or ``der``.

    A DER signature that does not parse becomes the empty signature, which is invalid by
    length: the item gets a ``False`` verdict and its Merkle leaf commits to empty bytes.
    Raises ``ValueError`` for a format not in :data:`~app.core.schemes.SIGNATURE_FORMATS`.
    """
    try:
        read = _READERS[signature_format]
    except KeyError:
        raise ValueError(f"unknown signature format {signature_format!r}; known: "
                         f"{', '.join(SIGNATURE_FORMATS)}") from None
    return read(bytes(sig))


def native_signature(scheme: Scheme, sig: bytes, signature_format: str) -> bytes:
    """``sig`` as ``scheme``'s verifier takes it, sent in a request's ``signature_format``:
    read from that format where the scheme accepts it (``Scheme.signature_formats``), else
    as sent, since a request-wide format applies only to the schemes that have it (a format
    no scheme accepts is read as sent too: the JSON API refuses it before, naming the field)."""
    return compact_signature(sig, scheme.signature_format_for(signature_format))
