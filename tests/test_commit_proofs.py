"""Inclusion proofs of receipts (RFC 6962 §2.1.1 paths, RFC 9162 §2.1.3.2 verification).

For random batches of 1–1,000 items every item's proof from :meth:`Receipt.proof` must
verify with the user-side :func:`zapverify.verify_inclusion`, and a changed verdict, leaf,
index, count, root or path must fail.  Seeded ``random`` keeps it reproducible and fast.
"""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pytest

from app.core.errors import LeafIndexOutOfRange
from app.core.schemes import SCHEMES
from app.engine.receipts.store import Receipt
from zapverify import leaf_hash, verify_inclusion


def _mth(leaves: list[bytes]) -> bytes:
    """RFC 6962 §2.1 MTH written straight from its recursive definition (test oracle)."""
    n = len(leaves)
    if n == 1:
        return leaves[0]
    k = 1 << ((n - 1).bit_length() - 1)
    return hashlib.sha256(b"\x01" + _mth(leaves[:k]) + _mth(leaves[k:])).digest()


def _path(m: int, leaves: list[bytes]) -> list[bytes]:
    """RFC 6962 §2.1.1 PATH(m, D[n]) from its recursive definition (test oracle)."""
    n = len(leaves)
    if n == 1:
        return []
    k = 1 << ((n - 1).bit_length() - 1)
    if m < k:
        return _path(m, leaves[:k]) + [_mth(leaves[k:])]
    return _path(m - k, leaves[k:]) + [_mth(leaves[:k])]


def _random_batch(rng: random.Random, n: int):
    """Items as a user would hold them, with random verdicts, and the receipt of them."""
    codes = [s.code for s in SCHEMES.values()]
    items = [(rng.choice(codes), rng.random() < 0.7, rng.randbytes(32), rng.randbytes(rng.randrange(0, 40)),
              rng.randbytes(64)) for _ in range(n)]
    leaves = np.array([np.frombuffer(leaf_hash(*it), np.uint8) for it in items], dtype=np.uint8)
    from app.engine.commit import merkle

    root = merkle.root(leaves)
    receipt = Receipt.build(verdicts=[it[1] for it in items], leaves=leaves, merkle_root=root,
                            schemes=["ed25519"])
    return items, receipt


def _flip_bit(b: bytes, rng: random.Random) -> bytes:
    i = rng.randrange(len(b) * 8)
    out = bytearray(b)
    out[i // 8] ^= 1 << (i % 8)
    return bytes(out)


# Small sizes cover every tree shape up to 17 leaves; the rest are drawn at random up to 1,000.
_rng_sizes = random.Random(6962)
SIZES = list(range(1, 18)) + [31, 32, 33, 64, 255, 256, 257, 1000] + _rng_sizes.sample(range(18, 1000), 6)


@pytest.mark.parametrize("n", SIZES)
def test_every_item_proof_verifies_and_mutations_fail(n):
    rng = random.Random(n)
    items, receipt = _random_batch(rng, n)
    root = receipt.merkle_root
    for i, (code, verdict, pk, msg, sig) in enumerate(items):
        p = receipt.proof(i)
        assert p.verdict == verdict and p.count == n and p.merkle_root == root
        user_leaf = leaf_hash(code, verdict, pk, msg, sig)
        assert p.leaf_hash == user_leaf
        assert verify_inclusion(root, user_leaf, i, n, p.audit_path)
        assert p.verify()
        # a changed verdict: the user's item with the other verdict is not in the tree
        assert not verify_inclusion(root, leaf_hash(code, not verdict, pk, msg, sig), i, n, p.audit_path)
        # a changed leaf (one bit of the hash, or one bit of the signed message)
        assert not verify_inclusion(root, _flip_bit(user_leaf, rng), i, n, p.audit_path)
        assert not verify_inclusion(root, leaf_hash(code, verdict, pk, _flip_bit(msg + b"\x00", rng), sig),
                                    i, n, p.audit_path)
        # a changed index
        for j in {0, i - 1, i + 1, n - 1, rng.randrange(n)} - {i}:
            if 0 <= j < n and receipt.leaf(j) != user_leaf:
                assert not verify_inclusion(root, user_leaf, j, n, p.audit_path)
        assert not verify_inclusion(root, user_leaf, n, n, p.audit_path)
        assert not verify_inclusion(root, user_leaf, -1, n, p.audit_path)
        # a changed root, path or count
        assert not verify_inclusion(_flip_bit(root, rng), user_leaf, i, n, p.audit_path)
        if p.audit_path:
            k = rng.randrange(len(p.audit_path))
            bad = list(p.audit_path)
            bad[k] = _flip_bit(bad[k], rng)
            assert not verify_inclusion(root, user_leaf, i, n, bad)
            assert not verify_inclusion(root, user_leaf, i, n, p.audit_path[:-1])
        assert not verify_inclusion(root, user_leaf, i, n, p.audit_path + [root])
        assert not verify_inclusion(root, user_leaf, i, 2 * n + 1, p.audit_path)


@pytest.mark.parametrize("n", list(range(1, 40)) + [100, 129])
def test_paths_match_rfc6962_recursive_definition(n):
    rng = random.Random(1000 + n)
    _, receipt = _random_batch(rng, n)
    leaves = [receipt.leaf(i) for i in range(n)]
    assert receipt.merkle_root == _mth(leaves)
    for m in range(n):
        assert receipt.proof(m).audit_path == _path(m, leaves)


def test_proof_of_a_real_engine_batch():
    """Receipt from Engine.run on items: a user who holds (pk, msg, sig) proves their verdict."""
    import nacl.signing

    from app.core.batch import Item
    from app.engine.verify.engine import Engine

    rng = random.Random(8032)
    sk = nacl.signing.SigningKey(rng.randbytes(32))
    pk = sk.verify_key.encode()
    msgs = [rng.randbytes(rng.randrange(1, 50)) for _ in range(23)]
    items = [Item("ed25519", pk, m, sk.sign(m).signature) for m in msgs]
    items[5] = Item("ed25519", pk, msgs[5] + b"!", items[5].signature)  # signature no longer matches
    engine = Engine()
    try:
        result = engine.run(items)
    finally:
        engine.close()
    receipt = Receipt.build(verdicts=result.verdicts, leaves=result.leaves, merkle_root=result.root,
                            schemes=[it.scheme for it in items], backends=result.backends)
    assert receipt.valid == 22 and not receipt.verdict(5)
    code = SCHEMES["ed25519"].code
    for i, it in enumerate(items):
        p = receipt.proof(i)
        leaf = leaf_hash(code, i != 5, it.public_key, it.message, it.signature)
        assert verify_inclusion(result.root, leaf, i, len(items), p.audit_path)
        assert not verify_inclusion(result.root, leaf_hash(code, i == 5, it.public_key, it.message, it.signature),
                                    i, len(items), p.audit_path)


@pytest.mark.parametrize("index", [-1, 7, 1 << 40])
def test_index_out_of_range_is_a_named_error(index):
    _, receipt = _random_batch(random.Random(0), 7)
    with pytest.raises(LeafIndexOutOfRange) as e:
        receipt.proof(index)
    assert e.value.code == "LEAF_INDEX_OUT_OF_RANGE" and e.value.status == 404 and e.value.field == "index"


def test_verdict_bitmap_is_lsb_first():
    v = [True, False, False, True, False, False, False, False, True, True]
    leaves = np.zeros((len(v), 32), np.uint8)
    from app.engine.commit import merkle

    r = Receipt.build(verdicts=v, leaves=leaves, merkle_root=merkle.root(leaves), schemes=["ed25519"])
    assert r.verdict_bitmap == bytes([0b00001001, 0b00000011])
    assert r.verdicts().tolist() == v and r.valid == 4
    assert [r.verdict(i) for i in range(len(v))] == v


# --- O(log n) proofs: kept tree levels (app/engine/commit/proofs.py ProofTree,
# app/engine/receipts/proof_cache.py; issue 48)
def test_proof_tree_gives_the_audit_paths_of_the_whole_tree():
    import os

    from app.engine.commit import merkle
    from app.engine.commit.proofs import ProofTree

    for n in (1, 2, 3, 255, 256, 257, 511, 512, 513, 1000, 4097):
        leaves = np.frombuffer(os.urandom(32 * n), np.uint8).reshape(n, 32)
        tree = ProofTree(leaves)
        assert tree.root == merkle.root(leaves)
        for i in sorted({0, 1 % n, n // 2, min(n - 1, 255), min(n - 1, 256), n - 1}):
            path = tree.audit_path(i)
            assert path == merkle.audit_path(leaves, i), (n, i)
            assert merkle.verify_inclusion(tree.root, bytes(leaves[i]), i, n, path)
    with pytest.raises(IndexError):
        tree.audit_path(n)


def test_proof_cache_builds_a_receipt_once_for_concurrent_proofs_and_keeps_within_its_bound():
    import os
    import threading

    from app.engine.commit import merkle
    from app.engine.receipts.proof_cache import ProofCache

    def receipt(n: int) -> Receipt:
        leaves = np.frombuffer(os.urandom(32 * n), np.uint8).reshape(n, 32)
        return Receipt.build(verdicts=np.ones(n, bool), leaves=leaves, merkle_root=merkle.root(leaves),
                             schemes=["ed25519"], backends={"ed25519": "cpu"}, duration_seconds=0.0, source="http")

    r = receipt(3000)
    loads = []

    def load():
        loads.append(1)
        return r

    cache = ProofCache(max_bytes=1 << 20, hasher=lambda: None)
    proofs = [None] * 16

    def one(i):
        proofs[i] = cache.proof(r.id, i * 150, exists=lambda: True, load=load)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(loads) == 1 and cache.stats()["builds"] == 1  # one read of the leaves, one build
    assert all(p.verify() and p.audit_path == r.proof(p.index).audit_path for p in proofs)
    # The bound: 3000-item trees are ~100 KB; twelve of them in 1 MiB do not all stay.
    for _ in range(12):
        other = receipt(3000)
        cache.proof(other.id, 0, exists=lambda: True, load=lambda o=other: o)
    assert cache.stats()["bytes"] <= 1 << 20 and cache.stats()["trees"] < 12
    # A receipt written large is built in the background, before any proof asks.
    warm = ProofCache(max_bytes=1 << 22, warm_items=1000, hasher=lambda: None)
    warm.written([r])
    warm._warmer.shutdown(wait=True)  # the warm-up is done
    assert warm.stats()["trees"] == 1
    assert warm.proof(r.id, 7, exists=lambda: True, load=lambda: pytest.fail("must not read the leaves")).verify()
    # A kept receipt the store no longer has (pruned) is not proved from memory.
    assert warm.proof(r.id, 7, exists=lambda: False, load=lambda: r) is None and warm.stats()["trees"] == 0
    with pytest.raises(LeafIndexOutOfRange):
        warm.proof(r.id, r.count, exists=lambda: True, load=lambda: r)


def test_a_kept_tree_proves_without_the_store_only_shortly_after_the_store_vouched(monkeypatch):
    """recent_proof: no store call (the route answers on the event loop) within
    CONFIRMED_SECONDS of the store saying it has the receipt; never for a tree nobody vouched
    for (built when written), after that time, or once the store said no."""
    import os

    from app.engine.commit import merkle
    from app.engine.receipts import proof_cache
    from app.engine.receipts.proof_cache import ProofCache

    n = 500
    leaves = np.frombuffer(os.urandom(32 * n), np.uint8).reshape(n, 32)
    r = Receipt.build(verdicts=np.ones(n, bool), leaves=leaves, merkle_root=merkle.root(leaves), schemes=["ed25519"],
                      backends={"ed25519": "cpu"}, duration_seconds=0.0, source="http")
    now = [1000.0]
    monkeypatch.setattr(proof_cache.time, "monotonic", lambda: now[0])
    cache = ProofCache(max_bytes=1 << 20, warm_items=100, hasher=lambda: None)
    cache.written([r])
    cache._warmer.shutdown(wait=True)
    assert cache.stats()["trees"] == 1 and cache.recent_proof(r.id, 3) is None  # kept, but not vouched for
    assert cache.proof(r.id, 3, exists=lambda: True, load=lambda: pytest.fail("kept")).verify()
    fast = cache.recent_proof(r.id, 9)
    assert fast is not None and fast.verify() and fast.audit_path == r.proof(9).audit_path
    with pytest.raises(LeafIndexOutOfRange):
        cache.recent_proof(r.id, n)
    now[0] += proof_cache.CONFIRMED_SECONDS + 0.01
    assert cache.recent_proof(r.id, 9) is None  # stale: the store is asked again
    assert cache.proof(r.id, 9, exists=lambda: False, load=lambda: r) is None  # pruned meanwhile
    assert cache.recent_proof(r.id, 9) is None and cache.stats()["trees"] == 0
