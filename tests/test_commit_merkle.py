import hashlib
import random

import pytest

from app.engine.commit import merkle


def mth(leaves):
    """RFC 6962 §2.1 Merkle Tree Hash, written recursively as the RFC states it."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaves[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return hashlib.sha256(b"\x01" + mth(leaves[:k]) + mth(leaves[k:])).digest()


@pytest.mark.parametrize("n", list(range(0, 70)) + [127, 128, 129, 1000])
def test_root_equals_rfc6962_recursive_definition(n):
    leaves = [hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(n)]
    assert merkle.root(leaves) == mth(leaves)


def test_rfc6962_known_root_of_one_empty_leaf():
    # RFC 6962 §2.1: MTH({d(0)}) = SHA-256(0x00 || d(0)); for d(0) = "" this is a known constant.
    leaf = hashlib.sha256(b"\x00").digest()
    assert merkle.root([leaf]).hex() == "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"


def test_leaf_hash_layout():
    got = merkle.leaf_hash(0x02, True, b"pk", b"msg", b"sig")
    h = hashlib.sha256
    want = h(b"\x00\x02\x01" + h(b"pk").digest() + h(b"msg").digest() + h(b"sig").digest()).digest()
    assert got == want
    assert merkle.leaf_hash(0x02, False, b"pk", b"msg", b"sig") != got


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 100])
def test_audit_paths_verify_and_tampering_fails(n):
    rng = random.Random(n)
    leaves = [rng.randbytes(32) for _ in range(n)]
    root = merkle.root(leaves)
    for i in range(n):
        path = merkle.audit_path(leaves, i)
        assert merkle.verify_inclusion(root, leaves[i], i, n, path)
        assert not merkle.verify_inclusion(root, bytes(32), i, n, path)
        if n > 1:
            assert not merkle.verify_inclusion(root, leaves[i], (i + 1) % n, n, path)
    with pytest.raises(IndexError):
        merkle.audit_path(leaves, n)
