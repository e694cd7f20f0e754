"""Batch CoreVerify by random linear combination (app/engine/reference/bls_batch.py): verdicts equal the
single CoreVerify's item by item.  The 10 k-item agreement run per invalid fraction is
``bench/bls_batch.py --agreement`` (bench/results/bls_batch_agreement.md); this is a sample."""

from __future__ import annotations

import random

import numpy as np
import pytest

from app.core.batch import Batch
from app.core.schemes import SCHEMES
from app.engine.backends.cpu import CpuBackend
from app.engine.reference import bls_batch, kat, reference
from app.engine.reference.bls_batch import BlsBatchVerifier


@pytest.fixture(scope="module")
def valid():
    return [it for s in range(3) for it in kat.sign_items("bls12-381", 16, seed=700 + s, msg_len=32)]


def _columns(items):
    return [it.public_key for it in items], [it.message for it in items], [it.signature for it in items]


def _single(items):
    return [reference.verify_bls12_381(it.public_key, it.message, it.signature) for it in items]


def _mixed(valid, fraction, seed):
    rng = random.Random(seed)
    out = list(valid)
    picks = rng.sample(range(len(valid)), round(fraction * len(valid)))
    for j, i in enumerate(picks):
        out[i] = kat.bls_invalid(valid[i], kat.BLS_INVALID_KINDS[j % len(kat.BLS_INVALID_KINDS)], rng)
    return out


@pytest.mark.parametrize("fraction", [0.0, 0.02, 0.1, 0.5, 1.0])
def test_verdicts_equal_single_core_verify(valid, fraction):
    items = _mixed(valid, fraction, seed=int(fraction * 100))
    want = _single(items)
    assert sum(not w for w in want) == round(fraction * len(items))
    assert BlsBatchVerifier().verify(*_columns(items)) == want


def test_every_bad_position_in_a_group_is_found(valid):
    items = valid[:8]
    for bad in range(8):
        mixed = list(items)
        mixed[bad] = kat.bls_invalid(items[bad], "message", random.Random(bad))
        v = BlsBatchVerifier(max_group=8)
        assert v.verify(*_columns(mixed)) == [i != bad for i in range(8)]
        assert v.pairing_checks <= 1 + 3  # the group, then one half per level


def test_all_valid_costs_one_multi_pairing_per_group(valid):
    v = BlsBatchVerifier()
    assert v.verify(*_columns(valid)) == [True] * len(valid)
    # A first group of FIRST_GROUP items, then the rest in one.
    assert v.pairing_checks == 2


def test_errors_that_cancel_in_a_plain_sum_are_caught(valid):
    """σ_0 + Δ and σ_1 − Δ sum to σ_0 + σ_1: an unweighted batch would accept both.  With
    secret random weights r_0 ≠ r_1 the combined check fails and both are found."""
    import py_arkworks_bls12381 as ark

    delta = ark.G2Point.hash_to_curve(b"delta", b"zapverify-test")
    a, b = valid[0], valid[1]
    s0 = ark.G2Point.from_compressed_bytes(a.signature) + delta
    s1 = ark.G2Point.from_compressed_bytes(b.signature) - delta
    items = [kat.Item(a.scheme, a.public_key, a.message, bytes(s0.to_compressed_bytes())),
             kat.Item(b.scheme, b.public_key, b.message, bytes(s1.to_compressed_bytes()))] + valid[2:6]
    assert BlsBatchVerifier(min_batch=1).verify(*_columns(items)) == [False, False] + [True] * 4


def test_scalars_are_fresh_secret_randomness(valid, monkeypatch):
    drawn = []
    real = bls_batch.secrets.randbits

    def spy(k):
        drawn.append(k)
        return real(k)

    monkeypatch.setattr(bls_batch.secrets, "randbits", spy)
    BlsBatchVerifier().verify(*_columns(valid[:8]))
    assert drawn == [bls_batch.SCALAR_BITS] * 8 and bls_batch.SCALAR_BITS >= 64


def test_many_failures_fall_back_to_single_checks(valid):
    items = _mixed(valid, 0.5, seed=9)
    v = BlsBatchVerifier()
    v.invalid_fraction = 0.4  # the running estimate says: mostly bad
    want = _single(items)
    assert v.verify(*_columns(items)) == want
    live = sum(1 for it in items if reference.bls_public_key(it.public_key) is not None
               and reference.bls_signature(it.signature) is not None)
    assert v.pairing_checks == live  # one single check per decodable item, no groups


def test_group_size_follows_the_invalid_fraction():
    assert bls_batch.group_size(0.0) == bls_batch.MAX_GROUP
    assert bls_batch.group_size(0.01) == 18  # √(3.3 / 0.01)
    assert bls_batch.group_size(0.5) <= 3


@pytest.mark.parametrize("bls_batch_on", [True, False])
def test_cpu_backend_gives_the_same_verdicts_and_leaves_either_way(valid, bls_batch_on):
    items = _mixed(valid, 0.1, seed=5)
    batch = Batch.from_items(SCHEMES["bls12-381"], *_columns(items))
    backend = CpuBackend(workers=2, chunk=16, bls_batch=bls_batch_on)
    try:
        _r = backend.run(batch)
        verdicts, leaves = _r.verdicts, _r.leaves
    finally:
        backend.close()
    assert verdicts.tolist() == _single(items)
    from app.engine.commit import merkle

    assert np.array_equal(leaves, merkle.batch_leaves(batch, verdicts))


def test_setting_reaches_the_cpu_backend():
    from app.config import Settings
    from app.engine.configs import engine_config
    from app.engine.verify.engine import Engine

    assert Engine(engine_config(Settings())).cpu.bls_batch is True
    assert Engine(engine_config(Settings(bls_batch=False))).cpu.bls_batch is False
