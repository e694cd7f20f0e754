"""The ``cuda`` backend: the kernel sources compiled by NVRTC (CuPy) and run on a GPU.

Lazily built and disk-cached modules, a stream of its own, batch columns read from the
page-locked pool in place or copied asynchronously (:mod:`app.engine.kernels.cudadev`),
errors checked on every launch and transfer.  Per-scheme availability comes from the
kernel registry and the build (:meth:`availability`); the engine runs the known-answer
self-test per scheme at start, measures crossover sizes and rates
(``calibrate_at_start``), and sends a scheme whose self-test failed to the CPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.engine.backends.kernel import KernelBackend
from app.engine.kernels.cudadev import CupyDevice, Transfer
from app.engine.kernels.registry import VerifyKernel


class CudaBackend(KernelBackend):
    """Kernel sources on CUDA GPU ``device_id`` through CuPy.

    Args:
        cupy: the CuPy module; imported on first use when None (tests pass a stand-in).
        device_id: the GPU ordinal.
        transfer: ``copy`` (default) | ``auto`` | ``zero-copy`` (see :mod:`app.engine.kernels.cudadev`).
        kernels: the verify-kernel table (default: the registry's).

    ``available()`` is False (never an exception) where CuPy or a GPU is missing.
    """

    name = "cuda"
    calibrate_at_start = True

    def __init__(self, *, cupy: Any = None, device_id: int = 0, transfer: Transfer = "copy",
                 kernels: Mapping[str, VerifyKernel] | None = None):
        super().__init__(kernels)
        self._cupy = cupy
        self.device_id = device_id
        self.transfer = transfer

    def _make_device(self) -> CupyDevice:
        return CupyDevice(self._cupy, self.device_id, self.transfer)
