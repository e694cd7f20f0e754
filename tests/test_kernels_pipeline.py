"""The pipelined CUDA path (app/engine/device/pipeline.py, occupancy.py, the CUDA backend's
chunking), run through the fake CuPy over the real sources: same verdicts, leaves and root
as the one-launch path, chunks of whole waves, and work queued so copies can overlap."""

from __future__ import annotations

import numpy as np
import pytest

from app.core.errors import KernelLaunchError
from app.engine.backends.cuda import CudaBackend
from app.engine.commit import merkle
from app.engine.device import hostbuild, occupancy, ops, pipeline
from app.engine.device.cudadev import CupyDevice
from app.engine.reference import kat
from app.engine.verify.grouping import batch_of, group_items
from tests.fake_cupy import POISON, FakeCupy
from tests.toy_scheme import TOY, TOY_ALL, toy_items, toy_valid

pytestmark = pytest.mark.skipif(hostbuild.compiler() is None, reason="no C++ compiler")


def toy_batch(n: int, seed: int = 0):
    items = toy_items("ed25519", n, seed)
    for i in range(0, n, 7):  # some invalid items in every chunk
        items[i] = kat.Item("ed25519", items[i].public_key, items[i].message + b"x", items[i].signature)
    [(key, _)] = group_items(items).items()
    return batch_of(key, items)


def truth(batch) -> list[bool]:
    return [toy_valid(batch.pks[i].tobytes(), batch.message(i), batch.sigs[i].tobytes(), batch.ctx, batch.options)
            for i in range(len(batch))]


# ------------------------------------------------------------------ sizes
def test_a_wave_is_every_sm_with_its_resident_blocks():
    assert occupancy.blocks_per_sm(168, 128) == 3          # 168 registers: 3 blocks of 4 warps in 64 K
    assert occupancy.blocks_per_sm(172, 128) == 2
    assert occupancy.blocks_per_sm(32, 128, smem_bytes=100 * 1024) == 2  # shared memory limits
    assert occupancy.blocks_per_sm(16, 32) == 32           # the block limit
    assert occupancy.wave_items(132, 168, 128) == 132 * 3 * 128  # H200: 50,688 items per wave


def test_chunks_are_whole_waves_unless_set():
    p = pipeline.plan(10_000, 1536, waves=2)
    assert p.chunk == 3072 and p.chunks[0] == (0, 3072) and p.chunks[-1] == (9216, 10_000)
    assert pipeline.plan(100, 1536, chunk_items=16).chunk == 16
    fake = FakeCupy()
    fake.num_regs["zv_verify_toy"] = 168
    b = CudaBackend(cupy=fake, kernels=TOY_ALL)
    assert b.preferred_batch_items("ed25519") == 2 * 4 * 3 * 128  # 2 waves of the fake's 4 SMs
    assert b.plan(toy_batch(10)).chunk == 3072


def test_a_chosen_kernel_variant_resizes_the_batches_the_gpu_asks_for():
    # The capabilities are built once; a variant chosen later by the calibration (ML-DSA's
    # block kernel: a block of threads per item) must change the batch size callers join
    # small frames into, or coalescing keeps the other kernel's waves.
    import dataclasses

    fake = FakeCupy()
    fake.num_regs["zv_verify_toy"] = 168
    block = dataclasses.replace(TOY, lanes=128)
    b = CudaBackend(cupy=fake, kernels=TOY_ALL, variants={"ed25519": {"thread": TOY, "block": block}})
    assert b.capabilities().batch_items["ed25519"] == 2 * 4 * 3 * 128  # 2 waves, a thread per item
    b.choose_variant("ed25519", "block")
    assert b.capabilities().batch_items["ed25519"] == 2 * 4 * 3  # 2 waves, a 128-thread block per item
    assert b.preferred_batch_items("ed25519") == 2 * 4 * 3


# ------------------------------------------------------------------ results
def test_pipelined_batch_is_queued_whole_before_the_host_waits_and_equals_one_launch():
    batch = toy_batch(100)
    fake = FakeCupy()
    dev = CupyDevice(fake)
    want = ops.verify_and_commit(dev, TOY, batch)
    fake.ops.clear()
    p = pipeline.plan(100, 1, chunk_items=16)
    got = pipeline.verify_and_commit(dev, TOY, batch, p)
    # every chunk's copies in, kernels and copies back (and the root's) are queued before
    # the host waits on a stream; a blocking copy back would wait after each chunk
    copies_back = [i for i, op in enumerate(fake.ops) if op[0] == "d2h"]
    assert len(copies_back) == 2 * len(p.chunks) + 1
    early = [op for op in fake.ops[:copies_back[-1]] if op[0] in ("sync", "host-wait")]
    # the only earlier waits are the staging ring's: packing a chunk waits for the event of
    # the last copy in out of the buffer it reuses (chunk k-2's), at most once per chunk
    assert all(op[:2] == ("host-wait", "event") for op in early), early
    assert len(early) <= len(p.chunks)
    # the copies back landed before the results were read (else they hold POISON)
    assert got[0].tolist() == want[0].tolist() == truth(batch)
    assert np.array_equal(got[1], want[1]) and got[2] == want[2]
    assert got[2] == merkle.root(merkle.batch_leaves(batch, got[0]))


def test_chunks_go_round_the_streams_and_the_root_waits_on_the_gpu():
    batch = toy_batch(100)
    fake = FakeCupy()
    dev = CupyDevice(fake)
    pipeline.verify_and_commit(dev, TOY, batch, pipeline.plan(100, 1, chunk_items=16, streams=3))
    verify_streams = [s for kind, what, s in fake.ops if kind == "launch" and what == "zv_verify_toy"]
    assert len(verify_streams) == 7 and len(set(verify_streams)) == 3
    assert all(a != b for a, b in zip(verify_streams, verify_streams[1:]))  # neighbours overlap
    # each chunk's copy in, kernels and copies back are queued on its own stream
    chunk_ops = []
    for op in fake.ops:
        if op[0] == "h2d" and op[1] > 32:  # a chunk's columns, one transfer
            chunk_ops.append([op])
        elif chunk_ops and op[0] in ("launch", "d2h") and op[1] != "zv_merkle_level":
            chunk_ops[-1].append(op)
    for ops_k in chunk_ops[:7]:
        assert len({s for *_, s in ops_k if _[0] != "launch" or _[1] != "zv_merkle_tail"}) == 1
    # the root waits for the other streams on the GPU (events), not on the host
    root_stream = verify_streams[0]
    assert {w for s, w in fake.waits if s == root_stream} == set(verify_streams) - {root_stream}
    assert all(pinned for kind, _, pinned in fake.transfers)  # every async copy from/to pinned memory


def test_one_launch_batches_after_a_pipelined_one_release_their_staging():
    fake = FakeCupy()
    dev = CupyDevice(fake, transfer="auto")  # pageable columns are staged one by one (put)
    pipeline.verify_and_commit(dev, TOY, toy_batch(100), pipeline.plan(100, 1, chunk_items=16, streams=3))
    assert dev.staged() == 0 and len(dev._streams) == 3  # the pipeline made its streams
    small = toy_batch(10)
    held = []
    for _ in range(20):
        ops.verify_and_commit(dev, TOY, small)  # copies in and out on the default stream
        held.append(dev.staged())
    assert held == [0] * 20  # each batch's get() waited for its stream: its sources are free
    # a copy queued on another stream still reads its source until that stream is waited for
    with dev.on(dev.streams(3)[1]):
        dev.put(np.arange(10, dtype=np.uint8))
    ops.verify_and_commit(dev, TOY, small)
    assert dev.staged() == 1
    dev.sync()
    assert dev.staged() == 0


def test_a_copy_back_lands_when_its_stream_is_waited_for():
    fake = FakeCupy()
    dev = CupyDevice(fake)
    s0, s1 = dev.streams(2)
    data = np.arange(64, dtype=np.uint8)
    with dev.on(s1):
        buf = dev.put(data)
        before = dev.record()
        out = dev.pinned(64)
        dev.get_async(buf, 64, out)
        after = dev.record()
    assert (out == POISON).all()  # queued, not done: a result read now is garbage
    assert not [op for op in fake.ops if op[0] == "host-wait"]  # queueing it did not wait
    s0.synchronize()
    before.synchronize()
    assert (out == POISON).all()  # another stream, or an event recorded before the copy
    after.synchronize()
    assert out.tolist() == data.tolist()
    with pytest.raises(KernelLaunchError):  # into pageable memory a copy is not asynchronous
        dev.get_async(buf, 64, np.empty(64, dtype=np.uint8))
    assert dev.get(buf, 64).tolist() == data.tolist()  # get() waits for its own stream


def test_small_batches_take_the_one_launch_path():
    fake = FakeCupy()
    b = CudaBackend(cupy=fake, kernels=TOY_ALL, chunk_items=64)
    batch = toy_batch(40)
    _r = b.run(batch, commit=True)
    verdicts = _r.verdicts
    assert verdicts.tolist() == truth(batch)
    assert [what for kind, what, _ in fake.ops if kind == "launch"].count("zv_verify_toy") == 1


@pytest.mark.parametrize("scheme_id", ["ed25519", "secp256k1"])
def test_real_kernels_pipelined_give_the_known_answers(scheme_id):
    fake = FakeCupy()
    b = CudaBackend(cupy=fake, chunk_items=40)  # chunks smaller than a block chunk of the kernels
    kas = kat.generate(scheme_id, 150, 150, seed=9)
    items = [ka.item for ka in kas]
    groups = {k: idx for k, idx in group_items(items).items() if k is not None}
    key, idx = max(groups.items(), key=lambda kv: len(kv[1]))
    assert len(idx) > 2 * 40
    batch = batch_of(key, [items[i] for i in idx])
    _r = b.run(batch, commit=True)
    verdicts, root = _r.verdicts, _r.root
    assert verdicts.tolist() == [kas[i].expected for i in idx]
    assert root == merkle.root(merkle.batch_leaves(batch, verdicts))


def test_a_fault_in_a_middle_chunk_is_a_launch_error():
    fake = FakeCupy()
    dev = CupyDevice(fake)
    fake.fail_async.add("zv_merkle_leaves")
    with pytest.raises(KernelLaunchError):
        pipeline.verify_and_commit(dev, TOY, toy_batch(100), pipeline.plan(100, 1, chunk_items=16))


def test_ingest_joins_small_frames_up_to_the_gpus_chunk():
    from types import SimpleNamespace

    from app.engine.ingest import DEFAULT_COALESCE_ITEMS, coalesce_target

    fake = FakeCupy()
    fake.num_regs["zv_verify_toy"] = 168
    gpu = SimpleNamespace(accelerated=[CudaBackend(cupy=fake, kernels=TOY_ALL)])
    assert coalesce_target(gpu, 0) == 2 * 4 * 3 * 128   # two waves of the fake's 4 SMs
    assert coalesce_target(gpu, 500) == 500              # a configured size wins
    assert coalesce_target(SimpleNamespace(accelerated=[]), 0) == DEFAULT_COALESCE_ITEMS
