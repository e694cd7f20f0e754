"""Joining small frames into one batch and splitting the answer back (app/engine/ingest/coalesce.py)."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.commit import merkle
from app.engine.ingest.coalesce import batch_key, join, joined_bytes
from app.engine.memory.pool import UmaPool
from app.engine.pipeline import Part, verify_and_record_parts
from app.engine.reference import kat
from app.wire import zap


def frames(scheme: str, sizes: list[int], seed: int = 1, **kw):
    items = kat.sign_items(scheme, sum(sizes), seed=seed, **kw)
    out, lo = [], 0
    for k in sizes:
        part = items[lo:lo + k]
        lo += k
        if k > 1:  # one bad signature per frame, so verdicts differ by position
            bad = part[1]
            part[1] = kat.Item(bad.scheme, bad.public_key, bad.message + b"!", bad.signature, bad.context,
                               bad.prehashed, bad.allow_high_s)
        frame = zap.encode_items(scheme, [i.public_key for i in part], [i.message for i in part],
                                 [i.signature for i in part], ctx=part[0].context,
                                 prehashed=part[0].prehashed)
        out.append((part, zap.decode_request(frame).batch))
    return out


def test_joined_batch_is_the_items_in_order(engine):
    parts = frames("ed25519", [3, 1, 5, 2])
    joined = join([b for _, b in parts])
    items = [it for part, _ in parts for it in part]
    assert len(joined) == 11 and batch_key(joined) == batch_key(parts[0][1])
    for i, it in enumerate(items):
        assert joined.pks[i].tobytes() == it.public_key and joined.sigs[i].tobytes() == it.signature
        assert bytes(joined.message(i)) == it.message
    joined.validate()


def test_a_joined_batch_answers_each_frame_with_its_own_verdicts_and_root(engine):
    parts = frames("ml-dsa-44", [2, 3], seed=4, context=b"ctx")
    recs = verify_and_record_parts(engine, None, join([b for _, b in parts]),
                                   [Part(2, 0.0, "tcp"), Part(3, 0.0, "tcp")])
    for (part, batch), rec in zip(parts, recs):
        alone = engine.run(batch)
        assert rec.verdicts.tolist() == alone.verdicts.tolist() == [True, False] + [True] * (len(part) - 2)
        assert np.array_equal(rec.leaves, alone.leaves) and rec.root == alone.root == merkle.root(alone.leaves)


def test_one_part_keeps_the_batch_root(engine):
    (_, batch), = frames("ed25519", [4])
    rec, = verify_and_record_parts(engine, None, batch, [Part(4, 0.0, "udp")])
    assert rec.root == engine.run(batch).root


def test_join_into_a_pool_buffer():
    parts = [b for _, b in frames("secp256k1", [2, 2], seed=9, prehashed=True)]
    with UmaPool.create(4 << 20, "heap") as pool, pool.acquire(joined_bytes(parts), "dispatch") as buf:
        joined = join(parts, alloc=lambda n: buf.array)
        base = buf.array.ctypes.data
        for col in (joined.pks, joined.sigs, joined.offsets, joined.msgs):
            assert base <= col.ctypes.data < base + buf.nbytes and col.ctypes.data % 8 == 0
        assert joined.prehashed and len(joined) == 4


def test_only_one_key_joins():
    a = frames("secp256k1", [2], seed=3)[0][1]
    b = frames("secp256k1", [2], seed=3, prehashed=True)[0][1]
    with pytest.raises(ValueError):
        join([a, b])
    with pytest.raises(ValueError):
        join([])
