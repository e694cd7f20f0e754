"""Pipelined verify-and-commit on a CUDA device: a batch in wave-sized chunks over several
streams, so copies and kernels of neighbouring chunks overlap.

For chunk k on stream k mod S: its columns are packed into the staging ring and copied to
the device (:meth:`CupyDevice.put_columns`), the verify kernel and the Merkle leaf kernel
run (the leaves land in the chunk's slice of one device buffer for the whole batch), and
its verdicts and leaves are queued back to page-locked host memory.  While chunk k's
kernels run, chunk k+1's copy in (another stream, the host-to-device copy engine) and
chunk k−1's copy back (the device-to-host engine) proceed; packing chunk k+2 into the
staging buffer chunk k used waits only for that copy's event.  After the last chunk one
stream waits for the others' events and builds the RFC 6962 root over every leaf, so the
leaves and root are made where the verdicts are and nothing comes back but the results.

A chunk is at least one full wave (every SM with its resident blocks: occupancy.py), so
no SM idles inside a chunk; a batch of one chunk or less runs the plain path
(:func:`app.engine.device.ops.verify_and_commit`), which has the least latency.

Errors: as :mod:`app.engine.device.ops` — a failed copy or launch raises
:class:`app.core.errors.KernelLaunchError` (seen at the latest at the final synchronisation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from app.core.batch import Batch
from app.core.errors import EmptyBatch
from app.engine.device import occupancy, ops
from app.engine.device.registry import VerifyKernel

#: Streams a pipelined batch cycles through: one chunk copying in, one computing, one
#: copying back.
STREAMS = 3


@dataclass(frozen=True)
class Plan:
    """How a batch of ``n`` items is cut: ``chunk`` items per chunk over ``streams`` streams."""

    n: int
    chunk: int
    streams: int

    @property
    def chunks(self) -> list[tuple[int, int]]:
        return [(lo, min(self.n, lo + self.chunk)) for lo in range(0, self.n, self.chunk)]


def wave(dev: Any, kernel: VerifyKernel) -> int:
    """Items in one full wave of ``kernel`` on ``dev`` (from the compiled kernel's registers
    and shared memory, and the device's multiprocessors; ``kernel.lanes`` threads per item)."""
    attrs = dev.attributes(kernel.source, kernel.entry)
    block = min(kernel.block, attrs.get("max_threads_per_block", kernel.block) or kernel.block)
    threads = occupancy.wave_items(dev.multiprocessors, attrs.get("num_regs", 0), block,
                                   attrs.get("shared_size_bytes", 0))
    return max(1, threads // max(1, kernel.lanes))  # SLH-DSA: a block of `lanes` threads per item


def plan(n: int, wave_items: int, *, waves: int = 2, chunk_items: int = 0, streams: int = STREAMS) -> Plan:
    """Chunks of ``waves`` full waves (or ``chunk_items`` when set), never below one wave."""
    chunk = chunk_items if chunk_items > 0 else max(1, waves) * max(1, wave_items)
    return Plan(n, max(1, chunk), max(1, streams))


def verify_and_commit(dev: Any, kernel: VerifyKernel, batch: Batch, p: Plan, *,
                      tail_max: int = ops.TAIL_MAX) -> tuple[np.ndarray, np.ndarray, bytes]:
    """Verdicts (``bool[N]``), leaves (``uint8[N, 32]``) and root of ``batch`` by the chunks
    of ``p`` (see the module doc); equal to :func:`ops.verify_and_commit`'s.  Raises
    :class:`EmptyBatch` for N = 0."""
    n = len(batch)
    if n == 0:
        raise EmptyBatch("a batch needs at least one item", field="count")
    if n <= p.chunk:
        return ops.verify_and_commit(dev, kernel, batch, tail_max=tail_max)
    streams = dev.streams(p.streams)
    verdicts = dev.pinned(n)
    leaves = dev.pinned(32 * n)
    leaves_dev = dev.alloc(32 * n)
    for k, (lo, hi) in enumerate(p.chunks):
        with dev.on(streams[k % len(streams)]):
            db = ops.put_batch(dev, batch.slice(lo, hi))
            v = ops.verify(dev, kernel, db)
            ops.merkle_leaves(dev, db, v, out=leaves_dev[32 * lo:32 * hi])
            dev.get_async(v, hi - lo, verdicts[lo:hi])
            dev.get_async(leaves_dev[32 * lo:32 * hi], 32 * (hi - lo), leaves[32 * lo:32 * hi])
    done = []
    for s in streams:
        with dev.on(s):
            done.append(dev.record())
    with dev.on(streams[0]):
        for ev in done[1:]:
            dev.wait(ev)
        root = ops.merkle_root_buffer(dev, leaves_dev, n, tail_max=tail_max)
        root_host = dev.pinned(32)
        dev.get_async(root, 32, root_host)
    dev.sync()
    return verdicts.astype(bool), leaves.reshape(n, 32), root_host.tobytes()
