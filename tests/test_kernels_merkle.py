"""Merkle kernels (merkle.cu), host build, against the CPU reference app/engine/commit/merkle.py."""

import random

import numpy as np
import pytest

from app.core.batch import Batch
from app.core.errors import EmptyBatch, RequestError
from app.core.schemes import SCHEMES
from app.engine.commit import merkle
from app.engine.device import hostlib, ops
from app.engine.reference import kat
from app.engine.verify.grouping import batch_of, group_items

pytestmark = pytest.mark.skipif(hostlib.hostbuild.compiler() is None, reason="no C++ compiler")


@pytest.fixture(scope="module")
def dev():
    return hostlib.device()


@pytest.fixture(scope="module")
def leaves_1100():
    rng = random.Random(6962)
    return np.frombuffer(rng.randbytes(32 * 1100), dtype=np.uint8).reshape(1100, 32)


def test_root_equals_cpu_for_every_n_1_to_1100(dev, leaves_1100):
    for n in range(1, 1101):
        assert ops.root(dev, leaves_1100[:n]) == merkle.root(leaves_1100[:n]), f"n={n}"


@pytest.mark.parametrize("tail_max", [1, 2, 7, 64])
def test_level_kernel_and_tail_kernel_agree(dev, leaves_1100, tail_max):
    # With a small tail_max the grid-wide level kernel builds most levels; the tail the rest.
    for n in (1, 2, 3, 5, 8, 9, 63, 64, 65, 127, 129, 1000, 1100):
        assert ops.root(dev, leaves_1100[:n], tail_max=tail_max) == merkle.root(leaves_1100[:n]), (n, tail_max)


def test_random_batches_leaves_and_root(dev):
    rng = random.Random(99)
    answers = kat.known_answers()
    for scheme in ("ed25519", "secp256k1", "ml-dsa-44", "slh-dsa-sha2-128f"):
        items = [ka.item for ka in answers[scheme]]
        for key, idx in group_items(items).items():
            if key is None:
                continue
            picked = [items[rng.choice(idx)] for _ in range(rng.randrange(1, 40))]
            batch = batch_of(key, picked)
            verdicts = np.array([rng.random() < 0.5 for _ in picked])
            want = merkle.batch_leaves(batch, verdicts)
            assert np.array_equal(ops.batch_leaves(dev, batch, verdicts), want), scheme
            leaves, root = ops.commit(dev, batch, verdicts)
            assert np.array_equal(leaves, want) and root == merkle.root(want)


def test_leaves_cover_every_field_of_the_item(dev):
    # Messages of varied lengths (0, block edges) and both verdicts; a leaf must change with
    # the scheme code, the verdict, the key, the message and the signature.
    rng = random.Random(5)
    s = SCHEMES["ed25519"]
    msgs = [rng.randbytes(n) for n in (0, 1, 55, 56, 63, 64, 65, 200, 1000)]
    pks = [rng.randbytes(32) for _ in msgs]
    sigs = [rng.randbytes(64) for _ in msgs]
    batch = Batch.from_items(s, pks, msgs, sigs)
    v = np.array([i % 2 == 0 for i in range(len(msgs))])
    got = ops.batch_leaves(dev, batch, v)
    assert np.array_equal(got, merkle.batch_leaves(batch, v))
    assert not np.array_equal(ops.batch_leaves(dev, batch, ~v), got)
    other = Batch.from_items(SCHEMES["bls12-381"], [p + bytes(16) for p in pks], msgs, [g + bytes(32) for g in sigs])
    assert np.array_equal(ops.batch_leaves(dev, other, v), merkle.batch_leaves(other, v))


def test_uint32_offsets_are_accepted(dev):
    s = SCHEMES["ed25519"]
    batch = Batch.from_items(s, [bytes(32)] * 3, [b"a", b"bb", b""], [bytes(64)] * 3)
    batch.offsets = batch.offsets.astype(np.uint32)
    v = np.array([True, False, True])
    assert np.array_equal(ops.batch_leaves(dev, batch, v), merkle.batch_leaves(batch, v))


def test_zero_items_is_a_clear_error(dev):
    with pytest.raises(EmptyBatch) as e:
        ops.root(dev, np.zeros((0, 32), dtype=np.uint8))
    assert e.value.field == "leaves" and e.value.code == "EMPTY_BATCH"
    empty = Batch.from_items(SCHEMES["ed25519"], [], [], [])
    with pytest.raises(EmptyBatch):
        ops.commit(dev, empty, np.zeros(0, dtype=bool))
    with pytest.raises(RequestError) as e:
        ops.root(dev, np.zeros((3, 31), dtype=np.uint8))
    assert e.value.field == "leaves"
