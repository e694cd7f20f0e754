"""Our own known answers: items signed with the reference libraries, and their mutations.

Used by the engine's start-up self-test, the tests (so they mean something where
``../shared/vectors`` is absent), the generated-vector CLI and the benchmarks.  The start-up
self-test reads fixed answers shipped with the package (:func:`known_answers`); the rest
sign fresh items with :func:`generate`.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib
import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from app.core.batch import Item
from app.core.schemes import SCHEMES, Scheme


@dataclass(frozen=True)
class KnownAnswer:
    """An item with the verdict our semantics give it.

    ``source`` names where it came from (``generated``, ``wycheproof/ed25519_test.json``...);
    ``rule`` is set where our documented semantics give another verdict than the source
    expected, and says which rule (see app/vectors.py).
    """

    item: Item
    expected: bool
    id: str
    source: str = "generated"
    rule: str = ""


# ------------------------------------------------------------------ signers
def _sign_ed25519(rng: random.Random, msgs: list[bytes], ctx: bytes, **_) -> list[tuple[bytes, bytes]]:
    import nacl.signing

    sk = nacl.signing.SigningKey(rng.randbytes(32))
    return [(sk.verify_key.encode(), sk.sign(m).signature) for m in msgs]


def _sign_secp256k1(rng: random.Random, msgs: list[bytes], ctx: bytes, compressed: bool = True,
                    prehashed: bool = False, **_) -> list[tuple[bytes, bytes]]:
    import coincurve

    from app.core.encoding import der_to_compact

    sk = coincurve.PrivateKey(rng.randbytes(32))
    pk = sk.public_key.format(compressed=compressed)
    out = []
    for m in msgs:
        der = sk.sign(m, hasher=None) if prehashed else sk.sign(m, hasher=lambda x: hashlib.sha256(x).digest())
        compact = der_to_compact(der)
        assert compact is not None  # libsecp256k1 parses the DER it wrote
        out.append((pk, compact))
    return out


def _sign_p256(rng: random.Random, msgs: list[bytes], ctx: bytes, compressed: bool = True,
               prehashed: bool = False, low_s: bool = False, **_) -> list[tuple[bytes, bytes]]:
    """ECDSA P-256 / SHA-256 (FIPS 186-5 §6.4.1) with OpenSSL, deterministic nonces (RFC 6979)
    so that a seed gives the same items.  s is as OpenSSL makes it, high half of the time,
    unless ``low_s``: then n − s where s > n/2, which verifies alike."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, utils

    from app.engine.reference.reference import P256_N

    sk = ec.derive_private_key(rng.randrange(1, P256_N), ec.SECP256R1())
    fmt = serialization.PublicFormat.CompressedPoint if compressed else serialization.PublicFormat.UncompressedPoint
    pk = sk.public_key().public_bytes(serialization.Encoding.X962, fmt)
    algorithm = ec.ECDSA(utils.Prehashed(hashes.SHA256()) if prehashed else hashes.SHA256(), deterministic_signing=True)
    out = []
    for m in msgs:
        r, s = utils.decode_dss_signature(sk.sign(m, algorithm))
        if low_s and s > P256_N // 2:
            s = P256_N - s
        out.append((pk, r.to_bytes(32, "big") + s.to_bytes(32, "big")))
    return out
#: SECP256K1_SCHNORRSIG_EXTRAPARAMS_MAGIC (libsecp256k1, include/secp256k1_schnorrsig.h).
_SCHNORRSIG_EXTRAPARAMS_MAGIC = b"\xda\x6f\xb3\x8c"


def tagged_hash(tag: str, data: bytes) -> bytes:
    """BIP-340's tagged hash: SHA-256(SHA-256(tag) ‖ SHA-256(tag) ‖ data), 32 bytes."""
    t = hashlib.sha256(tag.encode()).digest()
    return hashlib.sha256(t + t + data).digest()


def bip340_sign(secret: bytes, msg: bytes, aux: bytes) -> tuple[bytes, bytes]:
    """BIP-340 Sign of a message of any length: ``(32-byte x-only public key, 64-byte
    signature)`` for the 32-byte ``secret`` with 32 bytes of ``aux`` randomness.

    libsecp256k1's ``secp256k1_schnorrsig_sign_custom`` through coincurve's cffi ``lib``:
    coincurve 21's ``PrivateKey.sign_schnorr`` takes 32-byte messages only.  Raises
    ``ValueError`` for a secret that is not in [1, n − 1] or an ``aux`` not 32 bytes.
    """
    from app.core.encoding import secp256k1_lib

    if len(aux) != 32:
        raise ValueError("aux must be 32 bytes")
    ffi, lib, c = secp256k1_lib()
    keypair = ffi.new("secp256k1_keypair *")
    if not lib.secp256k1_keypair_create(c, keypair, bytes(secret)):
        raise ValueError("secret key out of range")
    xonly = ffi.new("secp256k1_xonly_pubkey *")
    lib.secp256k1_keypair_xonly_pub(c, xonly, ffi.NULL, keypair)
    pk = ffi.new("unsigned char[32]")
    lib.secp256k1_xonly_pubkey_serialize(c, pk, xonly)
    params = ffi.new("secp256k1_schnorrsig_extraparams *")
    params.magic = list(_SCHNORRSIG_EXTRAPARAMS_MAGIC)
    aux_buf = ffi.new("unsigned char[32]", bytes(aux))
    params.ndata = aux_buf
    sig = ffi.new("unsigned char[64]")
    m = bytes(msg)
    if not lib.secp256k1_schnorrsig_sign_custom(c, sig, m, len(m), keypair, params):
        raise ValueError("signing failed")
    return bytes(ffi.buffer(pk, 32)), bytes(ffi.buffer(sig, 64))


def _sign_bip340(rng: random.Random, msgs: list[bytes], ctx: bytes, **_) -> list[tuple[bytes, bytes]]:
    n = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141  # the group order (SEC 2 §2.4.1)
    secret = rng.randrange(1, n).to_bytes(32, "big")
    return [bip340_sign(secret, m, rng.randbytes(32)) for m in msgs]


def _sign_bls(rng: random.Random, msgs: list[bytes], ctx: bytes, **_) -> list[tuple[bytes, bytes]]:
    """CoreSign of the POP ciphersuite: sig = sk · H(msg), pk = sk · G1."""
    import py_arkworks_bls12381 as ark

    from app.engine.reference.reference import BLS_POP_DST

    # A secret key is a scalar in [1, r-1], r the BLS12-381 group order (RFC 9380 §8.8.1).
    r = 0x73EDA753299D7D483339D80809A1D80553BDA402FFFE5BFEFFFFFFFF00000001
    sk = ark.Scalar.from_be_bytes(rng.randrange(1, r).to_bytes(32, "big"))
    pk = (ark.G1Point() * sk).to_compressed_bytes()
    return [(bytes(pk), bytes((ark.G2Point.hash_to_curve(m, BLS_POP_DST) * sk).to_compressed_bytes()))
            for m in msgs]


def _sign_mldsa(rng: random.Random, msgs: list[bytes], ctx: bytes, scheme: Scheme, **_):
    from cryptography.hazmat.primitives.asymmetric import mldsa

    cls: Any = {44: mldsa.MLDSA44PrivateKey, 65: mldsa.MLDSA65PrivateKey, 87: mldsa.MLDSA87PrivateKey}[
        int(scheme.id.rsplit("-", 1)[1])]
    sk = cls.from_seed_bytes(rng.randbytes(32))
    pk = sk.public_key().public_bytes_raw()
    return [(pk, sk.sign(m, ctx)) for m in msgs]


def _sign_slhdsa(rng: random.Random, msgs: list[bytes], ctx: bytes, scheme: Scheme, **_):
    mod = importlib.import_module("pqcrypto.sign." + scheme.id.replace("-", "_"))
    pk, sk = mod.keygen()  # pqcrypto takes no seed; these keys are random
    return [(pk, mod.sign(sk, m, context=ctx)) for m in msgs]


_SIGNERS: dict[str, Callable[..., list[tuple[bytes, bytes]]]] = {
    "ed25519": _sign_ed25519, "secp256k1": _sign_secp256k1, "p256": _sign_p256, "bip340": _sign_bip340,
    "bls12-381": _sign_bls,
    "ml-dsa": _sign_mldsa, "slh-dsa": _sign_slhdsa}


def sign_items(scheme_id: str, count: int, *, seed: int = 0, msg_len: int | None = None,
               context: bytes = b"", compressed: bool = True, prehashed: bool = False,
               low_s: bool = False) -> list[Item]:
    """``count`` valid items of one scheme, all under one fresh key.

    Messages are random (``msg_len`` bytes, or 0–200 bytes when None; 32 when ``prehashed``).
    ``context`` applies to ML-DSA and SLH-DSA only; ``low_s`` items are signed with s ≤ n/2
    and verified under the option (for a scheme that accepts it).
    """
    scheme = SCHEMES[scheme_id]
    rng = random.Random(f"{scheme_id}/{seed}")
    if prehashed:
        msg_len = 32
    msgs = [rng.randbytes(msg_len if msg_len is not None else rng.randrange(201)) for _ in range(count)]
    ctx = context if scheme.has_context else b""
    signed = _SIGNERS[scheme.family](rng, msgs, ctx, scheme=scheme, compressed=compressed,
                                     prehashed=prehashed, low_s=low_s)
    return [Item(scheme_id, pk, m, sig, ctx, prehashed=prehashed, low_s=low_s) for m, (pk, sig) in zip(msgs, signed)]


def mutate(item: Item, rng: random.Random) -> Item:
    """Flip one random bit of the public key, the message or the signature.

    The result is invalid for every scheme here (a changed message or signature breaks
    the signature; a changed key either fails to parse or is another key).  An empty
    message is never chosen, nor the SEC 1 prefix byte of a secp256k1 key: flipping 0x04 to
    0x06/0x07 makes a hybrid encoding of the *same* key, which stays valid when the parity
    matches (prefixes are tested on their own).
    """
    fields = ["public_key", "signature"] + (["message"] if item.message else [])
    name = rng.choice(fields)
    data = bytearray(getattr(item, name))
    skip = 8 if name == "public_key" and item.scheme == "secp256k1" else 0
    bit = skip + rng.randrange(len(data) * 8 - skip)
    data[bit // 8] ^= 1 << (bit % 8)
    changes: dict[str, Any] = {name: bytes(data)}
    return replace(item, **changes)


#: Ways a BLS12-381 item is made invalid by :func:`bls_invalid`: each fails a different check
#: of CoreVerify (draft-irtf-cfrg-bls-signature-04 §2.7, KeyValidate §2.5).
BLS_INVALID_KINDS = ("message", "signature-negated", "key-other", "key-identity", "signature-infinity",
                     "key-not-in-subgroup", "signature-not-in-subgroup", "key-bad-infinity-flag", "bit-flip")


def off_subgroup_point(cls, size: int, rng: random.Random) -> bytes:
    """A compressed point on the curve but outside the prime-order subgroup (a random x
    that decodes almost never lands in the subgroup: the cofactors are large)."""
    while True:
        data = bytearray(rng.randbytes(size))
        data[0] = 0x80 | (data[0] & 0x1F)  # compressed, finite; an x >= p or off the curve is refused
        try:
            point = cls.from_compressed_bytes_unchecked(bytes(data))
        except ValueError:
            continue
        if not point.is_in_subgroup():
            return bytes(data)


def bls_invalid(item: Item, kind: str, rng: random.Random) -> Item:
    """``item`` (a valid BLS12-381 item) made invalid in the way ``kind`` names
    (:data:`BLS_INVALID_KINDS`); deterministic for a seeded ``rng``."""
    import py_arkworks_bls12381 as ark

    if kind == "message":
        msg = bytearray(item.message or b"\x00")
        msg[rng.randrange(len(msg))] ^= 1 << rng.randrange(8)
        return replace(item, message=bytes(msg))
    if kind == "signature-negated":
        sig = -ark.G2Point.from_compressed_bytes(item.signature)
        return replace(item, signature=bytes(sig.to_compressed_bytes()))
    if kind == "key-other":
        other = ark.G1Point() * ark.Scalar(rng.randrange(2, 2**128))
        return replace(item, public_key=bytes(other.to_compressed_bytes()))
    if kind == "key-identity":
        return replace(item, public_key=b"\xc0" + bytes(47))
    if kind == "signature-infinity":
        return replace(item, signature=b"\xc0" + bytes(95))
    if kind == "key-not-in-subgroup":
        return replace(item, public_key=off_subgroup_point(ark.G1Point, 48, rng))
    if kind == "signature-not-in-subgroup":
        return replace(item, signature=off_subgroup_point(ark.G2Point, 96, rng))
    if kind == "key-bad-infinity-flag":
        return replace(item, public_key=b"\xe0" + bytes(47))
    if kind == "bit-flip":
        return mutate(item, rng)
    raise ValueError(f"unknown invalid kind {kind!r}")


def generate(scheme_id: str, valid: int, mutated: int, *, seed: int = 0) -> list[KnownAnswer]:
    """``valid`` signed items and ``mutated`` one-bit mutations of them, for one scheme.

    The valid items are shared out over the scheme's variants, as the registry declares
    them: each public-key length (SEC 1 compressed and uncompressed for two), the
    ``prehashed`` and ``low_s`` options where the scheme accepts them, a context where it has one.
    """
    scheme = SCHEMES[scheme_id]
    variants: list[dict[str, Any]] = [{}]
    if len(scheme.pk_lens) > 1:  # the signers make two key forms: SEC 1 §2.3.3 compressed or not
        variants = [{"compressed": True}, {"compressed": False}]
    if scheme.accepts_option("prehashed"):
        variants.append({"prehashed": True})
    if scheme.accepts_option("low_s"):
        variants.append({"low_s": True})
    if scheme.has_context:
        variants.append({"context": b"zapverify-ctx"})
    items: list[Item] = []
    for v, kw in enumerate(variants):
        share = valid // len(variants) + (1 if v < valid % len(variants) else 0)
        if share:
            items += sign_items(scheme_id, share, seed=seed * 31 + v, **kw)
    rng = random.Random(f"mutate/{scheme_id}/{seed}")
    out = [KnownAnswer(it, True, f"{scheme_id}/gen/{seed}/valid/{i}") for i, it in enumerate(items)]
    for i in range(mutated):
        out.append(KnownAnswer(mutate(items[i % len(items)], rng), False, f"{scheme_id}/gen/{seed}/mutated/{i}"))
    return out


# ------------------------------------------------------------------ shipped known answers
#: The fixed known answers shipped with the package (written by scripts/gen_known_answers).
SHIPPED = Path(__file__).with_name("known_answers.json")

_ITEM_BYTES = ("public_key", "message", "signature", "context")


def encode(ka: KnownAnswer) -> dict:
    """``ka`` as a JSON object (byte fields in base64, the densest JSON-safe text)."""
    d = asdict(ka.item)
    for k in _ITEM_BYTES:
        d[k] = base64.b64encode(d[k]).decode()
    return {"item": d, "expected": ka.expected, "id": ka.id, "source": ka.source}


def decode(d: dict) -> KnownAnswer:
    """The inverse of :func:`encode`."""
    it = dict(d["item"])
    for k in _ITEM_BYTES:
        it[k] = base64.b64decode(it[k], validate=True)
    return KnownAnswer(Item(**it), d["expected"], d["id"], d.get("source", "generated"))


@functools.cache
def known_answers() -> dict[str, list[KnownAnswer]]:
    """The fixed known answers: per scheme id, two valid items and two one-bit mutations.

    They are read from the package (``known_answers.json``, made once by
    ``scripts/gen_known_answers`` and checked against the reference libraries by the
    tests), so the start-up self-test signs nothing: pqcrypto's SLH-DSA signing holds the
    GIL for up to a second per signature (docs/operations.md, start-up).  Raises
    :class:`FileNotFoundError` if the package data is missing (a broken install).
    """
    raw = json.loads(SHIPPED.read_text())
    return {s: [decode(x) for x in raw[s]] for s in SCHEMES}
