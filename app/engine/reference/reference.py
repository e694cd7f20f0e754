"""CPU reference verifiers: one item at a time, on the kept libraries of docs/architecture.md, "Schemes".

Each ``verify_<family>`` takes bytes-like arguments and returns a plain ``bool``; it never
raises for bad input (a wrong length, a point off the curve, a bad encoding is ``False``).
These functions *define* the verdicts every other backend must reproduce.

``RELEASES_GIL`` records which libraries release the GIL while they verify; it decides
nothing (the CPU backend's pool per family is the fixed table of
:mod:`app.engine.backends.cpu_policy`, which runs every Python-loop chunk on processes).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import nacl.bindings
import nacl.exceptions

from app.core.encoding import secp256k1_lib
from app.core.schemes import MAX_CONTEXT_BYTES, Scheme

#: True where the family's library call releases the GIL while it verifies.  A recorded fact,
#: not a switch: ``bench/cpu_engine.py`` prints it beside each row's two-thread speedup (the
#: raw loop on two threads against one: libsodium, libsecp256k1 through cffi, arkworks' BLS and
#: OpenSSL's ML-DSA scale, pqcrypto's SLH-DSA does not), and tests/test_backends_cpu.py
#: measures it on every library, so that a library update that changes it is noticed.
RELEASES_GIL: dict[str, bool] = {
    "ed25519": True,
    "secp256k1": True,
    "p256": True,  # OpenSSL's ECDSA verify: 2.05-2.12x on two threads (2 cores), measured
    "bip340": True,
    "bls12-381": True,
    "ml-dsa": True,
    "slh-dsa": False,
}


# ------------------------------------------------------------------ Ed25519 (libsodium)
def verify_ed25519(pk, msg, sig, ctx=b"", prehashed=False, allow_high_s=False, low_s=False) -> bool:
    """RFC 8032 §5.1.7 with libsodium's rules (see :mod:`app.core.schemes`)."""
    if len(pk) != 32 or len(sig) != 64:
        return False
    try:
        # crypto_sign_open runs crypto_sign_verify_detached on sig ‖ msg: the same checks.
        nacl.bindings.crypto_sign_open(bytes(sig) + bytes(msg), bytes(pk))
        return True
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError, ValueError, TypeError):
        return False


# ------------------------------------------------------------------ secp256k1 (libsecp256k1)
def verify_secp256k1(pk, msg, sig, ctx=b"", prehashed=False, allow_high_s=False, low_s=False) -> bool:
    """SEC 1 §4.1.4 ECDSA with libsecp256k1's rules: compact r ‖ s, low-S unless allowed."""
    if len(sig) != 64 or len(pk) not in (33, 65):
        return False
    if prehashed:
        if len(msg) != 32:
            return False
        digest = bytes(msg)
    else:
        digest = hashlib.sha256(msg).digest()
    ffi, lib, c = secp256k1_lib()
    pubkey = ffi.new("secp256k1_pubkey *")
    if not lib.secp256k1_ec_pubkey_parse(c, pubkey, bytes(pk), len(pk)):
        return False
    s = ffi.new("secp256k1_ecdsa_signature *")
    if not lib.secp256k1_ecdsa_signature_parse_compact(c, s, bytes(sig)):
        return False  # r or s >= n
    if allow_high_s:
        lib.secp256k1_ecdsa_signature_normalize(c, s, s)
    return lib.secp256k1_ecdsa_verify(c, s, digest, pubkey) == 1


# ------------------------------------------------------------------ P-256 (OpenSSL via cryptography)
#: The order n of the NIST P-256 base point (FIPS 186-5 / SP 800-186 §3.2.1.3).
P256_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
_p256: tuple | None = None


def _p256_lib() -> tuple:
    """(curve, ECDSA(SHA-256), ECDSA(Prehashed(SHA-256)), encode_dss_signature, from_encoded_point,
    InvalidSignature), imported on first use."""
    global _p256
    if _p256 is None:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, utils

        _p256 = (ec.SECP256R1(), ec.ECDSA(hashes.SHA256()), ec.ECDSA(utils.Prehashed(hashes.SHA256())),
                 utils.encode_dss_signature, ec.EllipticCurvePublicKey.from_encoded_point, InvalidSignature)
    return _p256


def verify_p256(pk, msg, sig, ctx=b"", prehashed=False, allow_high_s=False, low_s=False) -> bool:
    """ECDSA P-256 / SHA-256 verification, FIPS 186-5 §6.4.2, with OpenSSL's rules (see
    :mod:`app.core.schemes`).

    Args:
        pk: 33 or 65 bytes, SEC 1 §2.3.3/§2.3.4 (0x02/0x03 ‖ x or 0x04 ‖ x ‖ y; no hybrid).
        msg: any bytes, hashed with SHA-256; the 32-byte digest itself where ``prehashed``.
        sig: 64 bytes r ‖ s, big-endian (IEEE P1363).
        low_s: refuse s > n/2.  ``ctx`` and ``allow_high_s`` do not apply (high-S is valid).

    Returns ``False`` for any bad input (never raises): a wrong length, a key that does not
    decode to a point of the curve, r or s outside [1, n−1] (OpenSSL's check), high-S under
    ``low_s``, a prehashed message that is not 32 bytes.
    """
    if len(sig) != 64 or len(pk) not in (33, 65) or (prehashed and len(msg) != 32):
        return False
    curve, plain, digest, encode, load, invalid = _p256_lib()
    r, s = int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big")
    if low_s and s > P256_N // 2:
        return False
    try:
        key = load(curve, bytes(pk))
        # DER of any r, s ≥ 0; OpenSSL refuses r or s = 0 or ≥ n itself.
        key.verify(encode(r, s), bytes(msg), digest if prehashed else plain)
        return True
    except (invalid, ValueError, TypeError):
        return False
# ------------------------------------------------------------------ BIP-340 (libsecp256k1)
def verify_bip340(pk, msg, sig, ctx=b"") -> bool:
    """BIP-340 Verify (pk 32-byte x-only, sig 64-byte r ‖ s, a message of any length).

    libsecp256k1's own check, called through coincurve's cffi ``lib`` (the same calls as
    coincurve 21's ``PublicKeyXOnly(pk).verify(sig, msg)``, which passes messages of any
    length to ``secp256k1_schnorrsig_verify``, without the object and its exceptions):
    ``secp256k1_xonly_pubkey_parse`` is lift_x (x < p, x³ + 7 a square; even y), and
    ``secp256k1_schnorrsig_verify`` refuses r ≥ p and s ≥ n and checks R = s·G − e·P has
    even y and x(R) = r with e = tagged_hash("BIP0340/challenge", r ‖ pk ‖ m) mod n.
    Any other length is ``False``; never raises.
    """
    if len(pk) != 32 or len(sig) != 64:
        return False
    ffi, lib, c = secp256k1_lib()
    key = ffi.new("secp256k1_xonly_pubkey *")
    if not lib.secp256k1_xonly_pubkey_parse(c, key, bytes(pk)):
        return False
    m = bytes(msg)
    return lib.secp256k1_schnorrsig_verify(c, bytes(sig), m, len(m), key) == 1


# ------------------------------------------------------------------ BLS12-381 (arkworks)
#: Domain separation tag of the Ethereum proof-of-possession ciphersuite
#: (draft-irtf-cfrg-bls-signature-04 §4.2.3).
BLS_POP_DST = b"BLS_SIG_BLS12381G2_XMD:SHA-256_SSWU_RO_POP_"
_bls = None
#: The one encoding of the point at infinity (ZCash serialisation, used by the Ethereum
#: consensus specs): compression and infinity flags set, every other bit zero.
_G1_INFINITY = b"\xc0" + bytes(47)
_G2_INFINITY = b"\xc0" + bytes(95)


def bls_constants():
    """``(py_arkworks_bls12381 module, −G1, the G1 identity)``, imported on first use."""
    global _bls
    if _bls is None:
        import py_arkworks_bls12381 as ark

        _bls = (ark, -ark.G1Point(), ark.G1Point.identity())  # G1Point() is the generator
    return _bls


def _bls_point(data, size: int, infinity: bytes, cls):
    """Decode a compressed point with the subgroup check, or ``None``.

    arkworks accepts an infinity flag with non-zero bits after it (``0xe0…``, ``0xc0…01``),
    which the ZCash format and the Ethereum deserialization vectors reject; we refuse those
    before arkworks sees them.  ``from_compressed_bytes_unchecked`` + ``is_in_subgroup``
    accepts exactly what ``from_compressed_bytes`` accepts (checked on the Ethereum
    deserialization vectors) and costs about half as much, measured.
    """
    if len(data) != size:
        return None
    data = bytes(data)
    if data[0] & 0x40 and data != infinity:
        return None
    try:
        point = cls.from_compressed_bytes_unchecked(data)
    except (ValueError, TypeError):
        return None
    return point if point.is_in_subgroup() else None


def bls_public_key(pk):
    """KeyValidate (draft-irtf-cfrg-bls-signature-04 §2.5): the G1 point of a 48-byte key.

    Returns ``None`` for a bad encoding, a point off the curve or outside the prime-order
    subgroup, and for the identity.
    """
    ark, _, identity = bls_constants()
    point = _bls_point(pk, 48, _G1_INFINITY, ark.G1Point)
    return None if point is None or point == identity else point


def bls_signature(sig):
    """signature_to_point plus signature_subgroup_check (draft-04 §2.7 steps 1–3), or ``None``.

    The identity (``0xc0`` then zeros) is a valid signature point.
    """
    return _bls_point(sig, 96, _G2_INFINITY, bls_constants()[0].G2Point)


def bls_hash(msg):
    """hash_to_point: RFC 9380 hash to G2 (``BLS12381G2_XMD:SHA-256_SSWU_RO_``) under ``BLS_POP_DST``."""
    return bls_constants()[0].G2Point.hash_to_curve(bytes(msg), BLS_POP_DST)


def verify_bls12_381(pk, msg, sig, ctx=b"", prehashed=False, allow_high_s=False, low_s=False) -> bool:
    """CoreVerify with KeyValidate (draft-irtf-cfrg-bls-signature-04 §2.7, §2.5), POP suite.

    Keys and signatures are decoded by :func:`bls_public_key` and :func:`bls_signature`
    (flags, on the curve, in the prime-order subgroup; the identity key is refused).  The
    verdict is e(PK, H(msg)) · e(−G1, sig) == 1 with H the RFC 9380 hash to G2 under
    ``BLS_POP_DST``.
    """
    point, signature = bls_public_key(pk), bls_signature(sig)
    if point is None or signature is None:
        return False
    ark, neg_g1, _ = bls_constants()
    return bool(ark.GT.pairing_check([point, neg_g1], [bls_hash(msg), signature]))


# ------------------------------------------------------------------ ML-DSA (OpenSSL)
_MLDSA: dict[int, object] = {}


def _mldsa_class(sig_len: int):
    if not _MLDSA:
        from cryptography.hazmat.primitives.asymmetric import mldsa

        _MLDSA.update({2420: mldsa.MLDSA44PublicKey, 3309: mldsa.MLDSA65PublicKey,
                       4627: mldsa.MLDSA87PublicKey})
    return _MLDSA[sig_len]


def make_verify_mldsa(scheme: Scheme) -> Callable[..., bool]:
    """FIPS 204 ML-DSA.Verify (Alg. 3, pure, external) for one parameter set."""
    from cryptography.exceptions import InvalidSignature

    load = _mldsa_class(scheme.sig_len).from_public_bytes
    pk_len, sig_len = scheme.pk_len, scheme.sig_len

    def verify(pk, msg, sig, ctx=b"", prehashed=False, allow_high_s=False, low_s=False) -> bool:
        if len(pk) != pk_len or len(sig) != sig_len or len(ctx) > MAX_CONTEXT_BYTES:
            return False
        try:
            # Buffers as they are: the library reads any bytes-like object, and a copy of the
            # CPU backend's shared-memory views would cost 1 % of a verify.
            load(pk).verify(sig, msg, ctx)
            return True
        except (InvalidSignature, ValueError):
            return False

    return verify


# ------------------------------------------------------------------ SLH-DSA (pqcrypto)
def make_verify_slhdsa(scheme: Scheme) -> Callable[..., bool]:
    """FIPS 205 slh_verify (Alg. 24, pure, external) for one parameter set."""
    import importlib

    import pqcrypto

    mod = importlib.import_module("pqcrypto.sign." + scheme.id.replace("-", "_"))
    pk_len, sig_len = scheme.pk_len, scheme.sig_len

    def verify(pk, msg, sig, ctx=b"", prehashed=False, allow_high_s=False, low_s=False) -> bool:
        if len(pk) != pk_len or len(sig) != sig_len or len(ctx) > MAX_CONTEXT_BYTES:
            return False
        try:
            mod.verify(bytes(pk), bytes(msg), bytes(sig), context=bytes(ctx))
            return True
        except (pqcrypto.InvalidSignatureError, ValueError):
            return False

    return verify


_CACHE: dict[str, Callable[..., bool]] = {}


def verifier(scheme: Scheme) -> Callable[..., bool]:
    """The reference ``verify(pk, msg, sig, ctx=b"", **options) -> bool`` of ``scheme``: the
    options it accepts as keywords (``Scheme.verifier_options``; those of the ECDSA schemes
    are also accepted positionally after ``ctx`` in :data:`app.core.schemes.OPTIONS` order)."""
    fn = _CACHE.get(scheme.id)
    if fn is None:
        fn = {
            "ed25519": lambda: verify_ed25519,
            "secp256k1": lambda: verify_secp256k1,
            "p256": lambda: verify_p256,
            "bip340": lambda: verify_bip340,
            "bls12-381": lambda: verify_bls12_381,
            "ml-dsa": lambda: make_verify_mldsa(scheme),
            "slh-dsa": lambda: make_verify_slhdsa(scheme),
        }[scheme.family]()
        _CACHE[scheme.id] = fn
    return fn
