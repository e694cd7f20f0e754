"""CPU backend: the same verdicts whatever the pool kind, chunking or worker count."""

import pytest

from app.engine.backends.cpu import CpuBackend
from app.engine.verify import kat
from app.engine.verify.batch import Batch
from app.engine.verify.schemes import SCHEMES


def _batch(scheme_id, items):
    return Batch.from_items(SCHEMES[scheme_id], [i.public_key for i in items], [i.message for i in items],
                            [i.signature for i in items], ctx=items[0].context)


@pytest.mark.parametrize("parallelism", ["thread", "process"])
def test_pool_kinds_agree(parallelism):
    rng = __import__("random").Random(3)
    items = kat.sign_items("ed25519", 20, seed=1)
    items = items + [kat.mutate(i, rng) for i in items]
    want = [True] * 20 + [False] * 20
    backend = CpuBackend(workers=2, chunk=3, parallelism=parallelism)
    try:
        assert backend.verify(_batch("ed25519", items)).tolist() == want
    finally:
        backend.close()


def test_single_worker_and_empty_batch():
    backend = CpuBackend(workers=1)
    items = kat.sign_items("secp256k1", 3, seed=2)
    assert backend.verify(_batch("secp256k1", items)).tolist() == [True] * 3
    empty = Batch.from_items(SCHEMES["ed25519"], [], [], [])
    assert backend.verify(empty).shape == (0,)


def test_gil_table_decides_the_pool_kind():
    backend = CpuBackend(workers=2)
    assert not backend.uses_processes(SCHEMES["ed25519"])
    assert backend.uses_processes(SCHEMES["slh-dsa-sha2-128f"])


def test_close_leaves_no_worker_process():
    import multiprocessing

    backend = CpuBackend(workers=2, parallelism="process")
    items = kat.sign_items("ed25519", 4, seed=1)
    assert backend.verify(_batch("ed25519", items)).all()
    assert multiprocessing.active_children()
    backend.close()
    assert multiprocessing.active_children() == []
