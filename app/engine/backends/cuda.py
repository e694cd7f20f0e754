"""The ``cuda`` backend: the kernel sources compiled by NVRTC (CuPy) and run on a GPU.

Lazily built and disk-cached modules, a stream of its own, batch columns read from the
page-locked pool in place or copied asynchronously (:mod:`app.engine.device.cudadev`),
errors checked on every launch and transfer.  Per-scheme availability comes from the
kernel registry and the build (:meth:`availability`); the engine runs the known-answer
self-test per scheme at start, measures crossover sizes and rates
(``calibrate_at_start`` in its capabilities), and sends a scheme whose self-test failed to
the CPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from app.core.batch import Batch
from app.core.schemes import SCHEMES
from app.engine.backends.kernel import KernelBackend
from app.engine.device import pipeline
from app.engine.device.cudadev import CupyDevice, Transfer
from app.engine.device.registry import VerifyKernel


class CudaBackend(KernelBackend):
    """Kernel sources on CUDA GPU ``device_id`` through CuPy.

    Args:
        cupy: the CuPy module; imported on first use when None (tests pass a stand-in).
        device_id: the GPU ordinal.
        transfer: ``copy`` (default) | ``auto`` | ``zero-copy`` (see :mod:`app.engine.device.cudadev`).
        kernels: the verify-kernel table (default: the registry's).
        chunk_items: items per pipelined chunk; 0 (default) sizes chunks by ``waves``.
        waves: full waves of the GPU per chunk (a wave: every SM with its resident blocks
            of the scheme's kernel; :mod:`app.engine.device.occupancy`).
        streams: streams the chunks of a batch cycle through.

    A batch larger than one chunk is verified and committed by the pipeline of
    :mod:`app.engine.device.pipeline` (copies of neighbouring chunks overlap the kernels);
    a smaller one in one launch each, for the least latency.

    ``available()`` is False (never an exception) where CuPy or a GPU is missing.
    """

    name = "cuda"
    calibrate_at_start = True

    def __init__(self, *, cupy: Any = None, device_id: int = 0, transfer: Transfer = "copy",
                 kernels: Mapping[str, VerifyKernel] | None = None, chunk_items: int = 0, waves: int = 2,
                 streams: int = pipeline.STREAMS, kernel_variant: str = "auto",
                 variants: Mapping[str, Mapping[str, VerifyKernel]] | None = None):
        super().__init__(kernels, kernel_variant=kernel_variant, variants=variants)
        self._cupy = cupy
        self.device_id = device_id
        self.transfer = transfer
        self.chunk_items, self.waves, self.streams = chunk_items, waves, streams

    def _make_device(self) -> CupyDevice:
        return CupyDevice(self._cupy, self.device_id, self.transfer)

    def plan(self, batch: Batch) -> pipeline.Plan:
        """How ``batch`` is cut into pipelined chunks on this GPU (see the class doc)."""
        k = self._ready_kernel(batch.scheme)
        with self._lock:
            return pipeline.plan(len(batch), pipeline.wave(self.device, k), waves=self.waves,
                                 chunk_items=self.chunk_items, streams=self.streams)

    def preferred_batch_items(self, scheme_id: str) -> int | None:
        """Items that fill the GPU for ``scheme_id`` (one chunk), for callers that join small
        frames into batches; None when the scheme has no ready kernel here."""
        scheme = SCHEMES.get(scheme_id)
        k = self.kernel(scheme) if scheme is not None else None
        if k is None or scheme_id not in self.schemes():
            return None
        with self._lock:
            return pipeline.plan(1, pipeline.wave(self.device, k), waves=self.waves, chunk_items=self.chunk_items).chunk

    def batch_items(self) -> dict[str, int]:
        """:meth:`preferred_batch_items` of every ready scheme (the capabilities' ``batch_items``)."""
        return {s: size for s in sorted(self.schemes()) if (size := self.preferred_batch_items(s))}

    def _verify_and_commit(self, k: VerifyKernel, batch: Batch) -> tuple[np.ndarray, np.ndarray, bytes]:
        """Verdicts, leaves and root of ``batch``, pipelined over chunks when it is larger
        than one (:mod:`app.engine.device.pipeline`); the verdicts never leave the device
        before the leaves and root are made."""
        p = self.plan(batch)
        with self._lock:
            return pipeline.verify_and_commit(self.device, k, batch, p)
