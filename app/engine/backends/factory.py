"""Which accelerated backends an engine gets, from the ``backend`` setting.

``auto`` and ``cuda`` add the CUDA backend where CuPy sees a GPU; ``kernel-host`` adds the
host build of the kernels (slow; for checking kernels, never chosen by ``auto``); ``cpu``
adds none.  A forced backend that is not available here is left out, so the engine refuses
to start with a clear :class:`app.core.errors.BackendUnavailable`.
"""

from __future__ import annotations

import logging

from app.engine.backends.base import Backend

log = logging.getLogger("zapverify.engine")


def accelerated_backends(backend: str = "auto", *, cuda_device: int = 0, cuda_transfer: str = "copy",
                         kernel_variant: str = "auto", **cuda_options: int) -> list[Backend]:
    """Backends to pass to :class:`app.engine.verify.engine.Engine` (the CPU is added by it);
    ``kernel_variant`` goes to both kernel backends (:class:`app.engine.backends.kernel.KernelBackend`),
    ``cuda_options`` to :class:`app.engine.backends.cuda.CudaBackend` (chunk_items, waves,
    streams)."""
    out: list[Backend] = []
    if backend in ("auto", "cuda"):
        from app.engine.backends.cuda import CudaBackend

        cuda = CudaBackend(device_id=cuda_device, transfer=cuda_transfer, kernel_variant=kernel_variant,  # type: ignore[arg-type]
                           **cuda_options)  # type: ignore[arg-type]
        if cuda.available():
            out.append(cuda)
        else:
            log.info("no CUDA backend: %s", cuda.info().get("reason"))
    if backend == "kernel-host":
        from app.engine.backends.kernel_host import KernelHostBackend

        host = KernelHostBackend(kernel_variant=kernel_variant)
        if host.available():
            out.append(host)
    return out
