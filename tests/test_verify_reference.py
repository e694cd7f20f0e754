"""The CPU reference verdicts: the semantics every backend must reproduce (schemes.py)."""

import dataclasses
import hashlib
import random

import pytest

from app.core.schemes import SCHEMES
from app.engine.reference import kat, reference

L = 2**252 + 27742317777372353535851937790883648493  # RFC 8032 §5.1 group order
N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141  # SEC 2 secp256k1 order


def verify(item: kat.Item) -> bool:
    scheme = SCHEMES[item.scheme]
    return reference.verifier(scheme)(item.public_key, item.message, item.signature, item.context,
                                      **scheme.verifier_options(item))


@pytest.mark.parametrize("scheme_id", sorted(SCHEMES))
def test_known_answers_of_every_scheme(scheme_id):
    for ka in kat.known_answers()[scheme_id]:
        assert verify(ka.item) is ka.expected, ka.id


@pytest.mark.parametrize("scheme_id", ["ed25519", "secp256k1", "bls12-381", "ml-dsa-44", "slh-dsa-shake-128f"])
def test_wrong_lengths_are_false_not_errors(scheme_id):
    item = kat.known_answers()[scheme_id][0].item
    for pk, sig in [(item.public_key[:-1], item.signature), (item.public_key, item.signature[:-1]),
                    (item.public_key + b"\0", item.signature), (b"", b"")]:
        assert verify(kat.Item(scheme_id, pk, item.message, sig, item.context)) is False


# ------------------------------------------------------------------ Ed25519 (libsodium rules)
@pytest.fixture(scope="module")
def ed_item():
    return kat.sign_items("ed25519", 1, seed=7, msg_len=64)[0]


def with_sig(item, sig):
    return dataclasses.replace(item, signature=sig)


def test_ed25519_rejects_s_at_or_above_l(ed_item):
    r, s = ed_item.signature[:32], int.from_bytes(ed_item.signature[32:], "little")
    assert verify(ed_item)
    assert not verify(with_sig(ed_item, r + (s + L).to_bytes(32, "little")))  # same point, S >= L
    assert not verify(with_sig(ed_item, r + L.to_bytes(32, "little")))


def test_ed25519_rejects_small_order_and_non_canonical_keys(ed_item):
    identity = (1).to_bytes(32, "little")                       # small order (the neutral element)
    p = 2**255 - 19
    non_canonical = p.to_bytes(32, "little")                    # y = p, i.e. y >= p
    for pk in (identity, non_canonical, bytes(32)):
        assert not verify(kat.Item("ed25519", pk, ed_item.message, ed_item.signature))


def test_ed25519_rejects_small_order_r(ed_item):
    identity = (1).to_bytes(32, "little")
    assert not verify(with_sig(ed_item, identity + ed_item.signature[32:]))


# ------------------------------------------------------------------ secp256k1 (libsecp256k1 rules)
@pytest.fixture(scope="module")
def k1_item():
    return kat.sign_items("secp256k1", 1, seed=3, msg_len=40, compressed=False)[0]


def test_secp256k1_low_s_rule(k1_item):
    r, s = k1_item.signature[:32], int.from_bytes(k1_item.signature[32:], "big")
    assert s <= N // 2 and verify(k1_item)
    high = r + (N - s).to_bytes(32, "big")
    assert not verify(with_sig(k1_item, high))
    allowed = kat.Item("secp256k1", k1_item.public_key, k1_item.message, high, allow_high_s=True)
    assert verify(allowed)


@pytest.mark.parametrize("r,s", [(0, 1), (1, 0), (N, 1), (1, N), (2**256 - 1, 1)])
def test_secp256k1_range_checks(k1_item, r, s):
    assert not verify(with_sig(k1_item, r.to_bytes(32, "big") + s.to_bytes(32, "big")))


def test_secp256k1_key_encodings(k1_item):
    x, y = k1_item.public_key[1:33], k1_item.public_key[33:]
    odd = y[-1] & 1
    compressed = bytes([2 + odd]) + x
    hybrid_ok, hybrid_bad = bytes([6 + odd]) + x + y, bytes([7 - odd]) + x + y
    for pk, want in [(compressed, True), (hybrid_ok, True), (hybrid_bad, False),
                     (bytes([5]) + x + y, False), (bytes([4]) + x + bytes(32), False)]:
        assert verify(kat.Item("secp256k1", pk, k1_item.message, k1_item.signature)) is want


def test_secp256k1_prehashed_needs_exactly_32_bytes():
    item = kat.sign_items("secp256k1", 1, seed=4, prehashed=True)[0]
    assert item.prehashed and verify(item)
    for msg in (item.message[:31], item.message + b"\0"):
        assert not verify(kat.Item("secp256k1", item.public_key, msg, item.signature, prehashed=True))
    # Without the flag the 32 bytes are hashed again, which is another message.
    assert not verify(kat.Item("secp256k1", item.public_key, item.message, item.signature))


def test_ml_dsa_context_bounds():
    items = kat.sign_items("ml-dsa-44", 1, context=bytes(range(255)), seed=9)
    assert verify(items[0])
    other_ctx = kat.Item("ml-dsa-44", items[0].public_key, items[0].message, items[0].signature, b"x")
    assert not verify(other_ctx)
    too_long = kat.Item("ml-dsa-44", items[0].public_key, items[0].message, items[0].signature, bytes(256))
    assert not verify(too_long)


def test_slh_dsa_context_is_bound():
    item = kat.sign_items("slh-dsa-sha2-128f", 1, context=b"ctx", seed=2)[0]
    assert verify(item)
    assert not verify(kat.Item(item.scheme, item.public_key, item.message, item.signature, b""))


def test_mutations_flip_exactly_one_bit():
    rng = random.Random(1)
    item = kat.sign_items("ed25519", 1, msg_len=10)[0]
    for _ in range(50):
        m = kat.mutate(item, rng)
        diff = sum(bin(a ^ b).count("1") for f in ("public_key", "message", "signature")
                   for a, b in zip(getattr(item, f), getattr(m, f)))
        assert diff == 1 and not verify(m)
    assert hashlib  # noqa


def test_secp256k1_mutations_never_stay_valid():
    rng = random.Random(8)
    item = kat.sign_items("secp256k1", 1, seed=6, compressed=False)[0]
    assert all(not verify(kat.mutate(item, rng)) for _ in range(3000))
